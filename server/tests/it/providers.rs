//! Several LLM providers at once (`[[providers]]`): each model's calls go to its provider's
//! endpoint with that provider's key (named by a variable, never written in the file),
//! beside the environment's `OPENAI_BASE_URL` and the offline mirror, in one conversation.

use crate::support::{config_file, TestServer};
use fake_llm::FakeLlm;
use serde_json::json;

#[tokio::test]
async fn each_model_goes_to_its_providers_endpoint_with_its_key() {
    let (default, team) = (
        FakeLlm::start().await.unwrap(),
        FakeLlm::start().await.unwrap(),
    );
    // A variable every test process has stands for the team's key.
    let key = std::env::var("HOME").expect("HOME is set");
    let config = config_file(&format!(
        "[[providers]]\nid = \"team\"\nbase_url = \"{}\"\napi_key_env = \"HOME\"\n\
         headers = {{ X-Team = \"parlor\" }}\n\n\
         [[models]]\nname = \"teamed\"\nprovider = \"team\"\nmodel = \"team-model\"\n\n\
         [[models]]\nname = \"offline\"\nprovider = \"mirror\"\n\n\
         [[providers]]\nid = \"dead\"\nbase_url = \"http://127.0.0.1:{}/v1\"\n\n\
         [[models]]\nname = \"broken\"\nprovider = \"dead\"\n",
        team.base_url(),
        closed_port()
    ));
    let (path, base) = (config.path().display().to_string(), default.base_url());
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &path),
        ("OPENAI_BASE_URL", &base),
        ("OPENAI_API_KEY", "sk-default"),
        ("PARLOR_MODEL", "default-model"),
        ("PARLOR_ADMIN_TOKEN", "providers-admin"),
    ])
    .await;
    let first = server.chat("general", json!({"message": "hello"})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(default.requests().len(), 1);
    assert_eq!(default.requests()[0]["model"], "default-model");
    assert_eq!(
        default.authorizations()[0].as_deref(),
        Some("Bearer sk-default")
    );
    assert!(team.requests().is_empty());
    let session = first.session_id();
    let say = |text: &str| {
        let body = json!({"message": text, "session_id": session});
        server.chat("general", body)
    };
    say("!model teamed").await;
    let second = say("again").await;
    assert_eq!(second.meta().provider, "team");
    assert_eq!(
        team.requests().len(),
        1,
        "the team's model went to the team's endpoint"
    );
    assert_eq!(team.requests()[0]["model"], "team-model");
    let bearer = format!("Bearer {key}");
    assert_eq!(team.authorizations()[0].as_deref(), Some(bearer.as_str()));
    assert_eq!(default.requests().len(), 1, "nothing more to the default");
    // The history went along: the team's model received the whole conversation.
    let sent = team.requests()[0]["messages"].to_string();
    assert!(sent.contains("hello") && sent.contains("again"), "{sent}");
    say("!model offline").await;
    let third = say("and now?").await;
    assert!(third.text().contains("Mirror model"), "{}", third.text());
    assert_eq!(team.requests().len() + default.requests().len(), 2);
    // A provider that cannot be reached fails its own model's turn, names itself, and an
    // admin's /readyz says which provider fails and why (the others are ok).
    say("!model broken").await;
    let failed = say("hello?").await;
    let error = failed.events.iter().find_map(|e| match e {
        parlor_domain::ChatEvent::Error { message } => Some(message.clone()),
        _ => None,
    });
    assert!(
        error.is_some_and(|m| m.contains("connection refused")),
        "{:?}",
        failed.events
    );
    let ready: serde_json::Value = server
        .http
        .get(server.url("/readyz"))
        .header("x-parlor-admin-token", "providers-admin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let providers = &ready["providers"];
    let states = (providers["openai"].as_str(), providers["team"].as_str());
    assert_eq!(states, (Some("ok"), Some("ok")), "{ready}");
    let dead = providers["dead"].as_str().unwrap_or_default();
    assert!(
        dead.starts_with("failing: ")
            && dead.contains("connection refused")
            && dead.contains("the base_url of provider \"dead\""),
        "{ready}"
    );
    assert!(!ready.to_string().contains(&key), "no key in it");
}

/// A local port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
