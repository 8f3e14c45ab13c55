//! Every model call of a turn within the token budget, and every call counted: the tools'
//! definitions take their room, earlier rounds' results give way (oldest first) before each
//! later call, the debug report gives each call's tokens, and the turn's cost is that of
//! all its calls, as the provider reported them.

use super::hostile::{agent_folder, stdio, tool_vars, with};
use crate::support::{config_file, TestServer};
use parlor_server::tools::spec::Transport;
use serde_json::{json, Value};

const BUDGET: u64 = 2000;

fn cost(prompt: u64, completion: u64) -> u64 {
    ((prompt as f64 * 0.15 + completion as f64 * 0.60) * 1000.0).round() as u64
}

/// The text of a request's message (a string, or the texts of its parts).
fn text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A Parlor in front of the fake upstream whose agent `tooled` may use the scripted server
/// `pages`, with `settings` first in its `parlor.toml` and `env` besides; the files it
/// reads are kept while it runs.
async fn with_pages(
    settings: &str,
    env: &[(&str, &str)],
) -> (
    fake_llm::FakeLlm,
    TestServer,
    (
        tempfile::NamedTempFile,
        tempfile::NamedTempFile,
        tempfile::TempDir,
    ),
) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let Transport::Stdio { args, .. } = stdio(log.path(), "") else {
        unreachable!()
    };
    let config = config_file(&format!(
        "{settings}[[mcp_servers]]\nid = \"pages\"\ncommand = \"python3\"\nargs = {args:?}\n"
    ));
    let agents = agent_folder(&["pages"]);
    let vars = tool_vars(config.path(), agents.path());
    let (fake, server) = TestServer::with_upstream(&with(&vars, env)).await;
    (fake, server, (log, config, agents))
}

#[tokio::test]
async fn each_round_is_fitted_and_counted() {
    let settings = format!(
        "[tools]\nmax_rounds = 4\n\n\
         [[models]]\nname = \"tight\"\nmodel = \"gpt-4o-mini\"\ntoken_budget = {BUDGET}\n\
         price_in = 0.15\nprice_out = 0.60\n\n"
    );
    let (fake, server, _files) = with_pages(&settings, &[("PARLOR_MODEL", "tight")]).await;
    let ask = r#"read on [call-forever:pages__huge {"mb": 0.004}]"#;
    let reply = server.chat("tooled", json!({"message": ask})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let requests = fake.requests();
    assert_eq!(requests.len(), 5, "four rounds, then the last call");

    // Each call's tokens, in the debug report, within the budget.
    let session = reply.session_id();
    let history = server.services.histories.get("default").unwrap();
    let id = parlor_domain::ConversationId::parse(&session).unwrap();
    let info = history.store.info(&id).await.unwrap().unwrap();
    let tools = info.last_turn.unwrap().tools.unwrap();
    assert_eq!(tools.call_tokens.len(), 5, "{:?}", tools.call_tokens);
    assert!(
        tools.call_tokens.iter().all(|&t| t <= BUDGET),
        "{:?}",
        tools.call_tokens
    );
    assert_eq!(tools.own_us.len(), 4, "Parlor's own time in each round");
    assert!(
        tools.call_tokens.windows(2).any(|w| w[1] > w[0]),
        "later calls carry more: {:?}",
        tools.call_tokens
    );

    // The last request: the oldest results gave way, the newest is whole.
    let last = requests.last().unwrap();
    let results: Vec<String> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(text)
        .collect();
    assert_eq!(results.len(), 4);
    assert!(
        results[0].contains("left out of this request to fit the token budget"),
        "{}",
        results[0]
    );
    assert!(results[3].starts_with("lorem lorem"), "{}", results[3]);
    // What is stored stays whole.
    let stored = history.store.load(&id).await.unwrap();
    let kept = stored.iter().filter(|m| m.tool.is_some());
    assert!(
        kept.clone().count() == 4
            && kept
                .into_iter()
                .all(|m| m.texts().any(|t| t.starts_with("lorem")))
    );

    // The turn's cost is every call's, as the fake reported it (a quarter of the request's
    // length in prompt tokens, 5 completion tokens each).
    let expected: u64 = requests
        .iter()
        .map(|r| cost(r.to_string().len() as u64 / 4, 5))
        .sum();
    let done = reply.done().unwrap();
    let spent = done.meter.as_ref().unwrap().cost.unwrap();
    assert_eq!(spent.turn_nano_usd, Some(expected));
    assert_eq!(spent.conversation_nano_usd, expected);
}

#[tokio::test]
async fn every_call_of_a_tool_turn_counts_against_the_daily_quota() {
    let env = [
        ("PARLOR_MODEL", "gpt-4o-mini"),
        ("PARLOR_AUTH", "local"),
        ("PARLOR_TOKENS_PER_DAY", "100000000"),
    ];
    let (fake, server, _files) = with_pages("[tools]\nmax_rounds = 2\n\n", &env).await;
    crate::accounts::add_users(&server).await;
    let bob = crate::accounts::cookie_of(&server, "bob").await;
    let used = || async {
        let (status, body) = server.get("/api/account", Some(&bob)).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()["used_today"]
            .as_u64()
            .unwrap()
    };
    let before = used().await;
    let ask = r#"read on [call-forever:pages__huge {"mb": 0.001}]"#;
    let headers = [("cookie", bob.as_str())];
    let reply = server
        .chat_request("tooled", "", json!({"message": ask}), None, &headers)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "two rounds, then the last call");
    // Each call as the fake reported it: a quarter of the request's length in prompt
    // tokens, 5 completion tokens; all of them count, not only the last.
    let expected: u64 = requests
        .iter()
        .map(|r| r.to_string().len() as u64 / 4 + 5)
        .sum();
    let last = requests.last().unwrap().to_string().len() as u64 / 4 + 5;
    assert!(expected > last);
    assert_eq!(used().await - before, expected);
}
