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
    // The provider's own headers go to its endpoint, and only there.
    assert_eq!(team.headers()[0]["x-team"], "parlor");
    assert!(default.headers()[0].get("x-team").is_none());
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
    let ready = server.admin_get("/readyz", "providers-admin").await;
    let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
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
    // /metrics says the same in numbers.
    let metrics = server.admin_get("/metrics", "providers-admin").await;
    let gauge = |name: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("parlor_up{")
                    && l.contains("kind=\"provider\"")
                    && l.contains(&format!("name=\"{name}\""))
            })
            .unwrap_or_else(|| panic!("no gauge for {name}: {metrics}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!((gauge("dead").as_str(), gauge("team").as_str()), ("0", "1"));
    assert!(metrics.contains("parlor_ready "), "{metrics}");
    assert!(!metrics.contains(&key), "no key in it");
}

/// A local port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Anthropic's Messages API beside an OpenAI-compatible provider and the mirror, in one
/// conversation: the key goes in `x-api-key`, the request is one the API accepts (the fake
/// checks it as the API does), and the prompt cache's share comes back with the usage.
#[tokio::test]
async fn an_anthropic_provider_an_openai_one_and_the_mirror_in_one_conversation() {
    let (claude, team) = (
        FakeLlm::start().await.unwrap(),
        FakeLlm::start().await.unwrap(),
    );
    let key = std::env::var("HOME").expect("HOME is set");
    let config = config_file(&format!(
        "[[providers]]\nid = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\
         api_key_env = \"HOME\"\n\n\
         [[providers]]\nid = \"team\"\nbase_url = \"{}\"\n\n\
         [[models]]\nname = \"sonnet\"\nprovider = \"claude\"\nmodel = \"claude-sonnet-4-5\"\n\n\
         [[models]]\nname = \"teamed\"\nprovider = \"team\"\n",
        claude.base_url(),
        team.base_url()
    ));
    let path = config.path().display().to_string();
    let server = TestServer::start(&[("PARLOR_CONFIG", &path)]).await;
    let first = server.chat("general", json!({"message": "hello"})).await;
    assert!(first.text().contains("Mirror model"), "offline by default");
    let session = first.session_id();
    let say = |text: &str| {
        let body = json!({"message": text, "session_id": session});
        server.chat("general", body)
    };
    say("!model sonnet").await;
    let asked = say("hi claude").await;
    assert_eq!(asked.meta().provider, "claude");
    assert!(
        asked.text().starts_with("Echo: hi claude"),
        "{}",
        asked.text()
    );
    let sent = &claude.requests()[0];
    assert_eq!(sent["model"], "claude-sonnet-4-5");
    assert!(sent["max_tokens"].is_u64() && sent["stream"] == true);
    assert_eq!(claude.authorizations()[0].as_deref(), Some(key.as_str()));
    let written = asked.done().and_then(|d| d.usage.clone()).unwrap();
    assert!(written.cache_write_tokens.unwrap_or(0) > 0, "{written:?}");
    // The next turn reads back what the first wrote.
    let again = say("and again").await;
    let read = again.done().and_then(|d| d.usage.clone()).unwrap();
    assert!(read.cached_tokens.unwrap_or(0) > 0, "{read:?}");
    let history = claude.requests()[1]["messages"].to_string();
    assert!(history.contains("hi claude") && history.contains("Echo: hi claude"));
    // The OpenAI-compatible provider gets the same conversation.
    say("!model teamed").await;
    let third = say("and you?").await;
    assert_eq!(third.meta().provider, "team");
    let sent = team.requests()[0]["messages"].to_string();
    assert!(
        sent.contains("hi claude") && sent.contains("and you?"),
        "{sent}"
    );
}

/// The debug facts of each turn say how the provider's cache served the prompt and, when the
/// history no longer starts as the last turn's did, why; `/metrics` counts the tokens.
#[tokio::test]
async fn each_turn_reports_its_cache_use_and_why_its_prefix_changed() {
    let claude = FakeLlm::start().await.unwrap();
    let config = config_file(&format!(
        "[[providers]]\nid = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\n\
         [[models]]\nname = \"sonnet\"\nprovider = \"claude\"\nmax_context = 4\nwindow_step = 0\n",
        claude.base_url()
    ));
    let path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &path),
        ("PARLOR_MODEL", "sonnet"),
        ("PARLOR_ADMIN_TOKEN", "cache-admin"),
    ])
    .await;
    let first = server.chat("general", json!({"message": "one"})).await;
    assert_eq!(
        first.meta().provider,
        "claude",
        "PARLOR_MODEL on a provider, offline"
    );
    let session = first.session_id();
    let turn = |text: &str| {
        let body = json!({"message": text, "session_id": session});
        server.chat("general", body)
    };
    let debug = || async {
        let url = format!("/api/chat/general/debug?session_id={session}");
        let (_, body) = server.get(&url, None).await;
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["last_turn"].clone()
    };
    let report = debug().await;
    assert_eq!(report["cache"]["read"], 0, "{report}");
    assert!(report["cache"]["written"].as_u64().unwrap() > 0, "{report}");
    assert!(report.get("prefix_change").is_none(), "{report}");
    turn("two").await;
    let report = debug().await;
    assert!(report["cache"]["read"].as_u64().unwrap() > 0, "{report}");
    assert!(
        report.get("prefix_change").is_none(),
        "the prefix held: {report}"
    );
    // The third question passes the window of 4: the oldest exchange is cut, and said so.
    turn("three").await;
    let report = debug().await;
    assert_eq!(report["prefix_change"]["reason"], "cut", "{report}");
    assert_eq!(report["prefix_change"]["dropped"], 2, "{report}");
    assert_eq!(report["prefix_change"]["by"], "sliding_window", "{report}");
    let metrics = server.admin_get("/metrics", "cache-admin").await;
    let line = metrics.lines().find(|l| {
        l.starts_with("parlor_prompt_tokens_total")
            && l.contains("model=\"sonnet\"")
            && l.contains("cache=\"cached\"")
    });
    assert!(line.is_some(), "{metrics}");
}

/// An OpenAI-compatible server that reports `prompt_tokens_details.cached_tokens` (the fake,
/// emulating a prefix cache): Parlor reads them, shows them in the turn's usage and counts
/// them apart in `/metrics`.
#[tokio::test]
async fn an_openai_compatible_servers_cached_tokens_are_read() {
    let fake = fake_llm::FakeLlm::start_with_prefix_cache().await.unwrap();
    let base = fake.base_url();
    let server = TestServer::start(&[
        ("OPENAI_BASE_URL", &base),
        ("PARLOR_MODEL", "prefix-cached-model"),
        ("PARLOR_ADMIN_TOKEN", "cache-admin"),
    ])
    .await;
    let long = "a question long enough for a prefix worth caching ".repeat(20);
    let first = server.chat("general", json!({"message": long})).await;
    let usage = first.done().and_then(|d| d.usage.clone()).expect("usage");
    assert_eq!(usage.cached_tokens, Some(0), "nothing cached yet");
    let body = json!({"message": "and the next one", "session_id": first.session_id()});
    let second = server.chat("general", body).await;
    let usage = second.done().and_then(|d| d.usage.clone()).expect("usage");
    let cached = usage.cached_tokens.expect("the server said");
    assert!(
        cached > 0 && cached < usage.prompt_tokens,
        "the first request's prefix is read back: {usage:?}"
    );
    let metrics = server.admin_get("/metrics", "cache-admin").await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("parlor_prompt_tokens_total{")
                && l.contains("model=\"prefix-cached-model\"")
                && l.contains("cache=\"cached\"")
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.ends_with(&format!(" {cached}")), "{line}");
}
