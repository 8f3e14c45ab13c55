//! The context meter, on file and Redis histories: each call's tokens part by part against
//! the model's window (declared, known for the family, or unknown), the provider's usage
//! replacing the estimate, costs per call and per conversation, and what goes next near
//! the limit.

use crate::support::{config_file, TestServer};
use fake_llm::redis_server::RedisServer;
use parlor_domain::meter::{Cost, Meter};
use parlor_domain::{ConversationId, DoneEvent, MetaEvent};
use serde_json::json;

static ALICE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::browser("a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"));

/// `quick` is gpt-4o-mini with a declared window and prices; `tiny` has a window of 200
/// tokens; `local` has neither and no known family.
const MODELS: &str = r#"
[[models]]
name = "quick"
model = "gpt-4o-mini"
context_tokens = 16000
price_in = 0.15
price_out = 0.60

[[models]]
name = "tiny"
model = "local-tiny"
context_tokens = 200

[[models]]
name = "local"
model = "llama-local"
"#;

fn config(redis: Option<&RedisServer>) -> tempfile::NamedTempFile {
    let mut text = MODELS.to_owned();
    if let Some(redis) = redis {
        text.push_str(&format!(
            "\n[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"meter:\" }}\n",
            redis.url()
        ));
    }
    config_file(&text)
}

fn meter(meta: &MetaEvent) -> Meter {
    meta.meter.clone().expect("meta carries the meter")
}

fn done_meter(done: Option<&DoneEvent>) -> Meter {
    done.and_then(|d| d.meter.clone())
        .expect("done carries the meter once usage is reported")
}

/// The cost of a call at `quick`'s prices, in nano-dollars.
fn quick_cost(prompt: u64, completion: u64) -> u64 {
    ((prompt as f64 * 0.15 + completion as f64 * 0.60) * 1000.0).round() as u64
}

async fn the_meter_follows_each_call(redis: Option<&RedisServer>) {
    let config = config(redis);
    let path = config.path().display().to_string();
    let (_fake, server) =
        TestServer::with_upstream(&[("PARLOR_CONFIG", &path), ("PARLOR_MODEL", "quick")]).await;

    let first = server
        .chat_with(
            "concise",
            "",
            json!({"message": "hello there"}),
            Some(ALICE.as_str()),
        )
        .await;
    let session = first.session_id();
    let before = meter(first.meta());
    assert_eq!(before.window, Some(16_000));
    assert_eq!(before.sent, first.meta().history.estimated_tokens);
    assert_eq!(before.sent, before.parts.total());
    assert!(before.parts.system > 0, "the agent's personality is sent");
    assert_eq!(
        (
            before.parts.history,
            before.parts.summary,
            before.parts.context
        ),
        (0, 0, 0)
    );
    assert_eq!(first.meta().message_tokens, Some(before.parts.message));
    assert!(!before.reported && !before.near_limit);
    assert_eq!(
        before.cost,
        Some(Cost {
            turn_nano_usd: None,
            conversation_nano_usd: 0
        })
    );

    // The provider's usage replaces the estimate and prices the call.
    let done = first.done().unwrap();
    let usage = done.usage.clone().unwrap();
    let after = done_meter(first.done());
    assert!(after.reported);
    assert_eq!(after.sent, usage.prompt_tokens);
    assert_eq!(after.completion, Some(usage.completion_tokens));
    assert_eq!(after.parts, before.parts, "the breakdown is Parlor's count");
    let turn_one = quick_cost(usage.prompt_tokens, usage.completion_tokens);
    assert!(turn_one > 0);
    assert_eq!(
        after.cost,
        Some(Cost {
            turn_nano_usd: Some(turn_one),
            conversation_nano_usd: turn_one
        })
    );
    let reply_tokens = done.message_tokens.expect("the reply's tokens");

    // The next call: history counts, the conversation's cost carries over, cached tokens
    // are shown when the provider reports them.
    let second = server
        .chat_with(
            "concise",
            "",
            json!({"message": "again [cached]", "session_id": session}),
            Some(ALICE.as_str()),
        )
        .await;
    let before = meter(second.meta());
    assert!(before.parts.history > 0, "{before:?}");
    assert_eq!(before.cost.unwrap().conversation_nano_usd, turn_one);
    let usage = second.done().unwrap().usage.clone().unwrap();
    let after = done_meter(second.done());
    assert_eq!(after.cached, Some(usage.prompt_tokens / 2));
    let turn_two = quick_cost(usage.prompt_tokens, usage.completion_tokens);
    assert_eq!(
        after.cost,
        Some(Cost {
            turn_nano_usd: Some(turn_two),
            conversation_nano_usd: turn_one + turn_two
        })
    );

    // Kept with the conversation: the debug report and the page show the last call's meter.
    let (status, body) = server
        .get(
            &format!("/api/chat/concise/debug?session_id={session}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let debug: serde_json::Value = serde_json::from_str(&body).unwrap();
    let stored: Meter = serde_json::from_value(debug["last_turn"]["meter"].clone()).unwrap();
    assert_eq!(stored, after);
    let (status, page) = server
        .get(
            &format!("/chat?agent=concise&session={session}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(status, 200);
    let headline = format!(
        "{} / 16,000 tokens",
        parlor_domain::meter::group_digits(after.sent)
    );
    assert!(page.contains(&headline), "the page shows {headline:?}");
    assert!(page.contains("reported by the provider"));

    // With the debug panel, each message shows its tokens, as the turn's events said.
    let (_, debug_page) = server
        .get(
            &format!("/chat?agent=concise&session={session}&debug=true"),
            Some(ALICE.as_str()),
        )
        .await;
    for tokens in [first.meta().message_tokens.unwrap(), reply_tokens] {
        let tag = format!(">{} tokens<", parlor_domain::meter::group_digits(tokens));
        assert!(debug_page.contains(&tag), "{tag} on the debug page");
    }
    assert!(!page.contains("tokens-tag"), "only with the debug panel");

    // A model without a declared or known window: tokens without a limit.
    let switched = server
        .chat_with(
            "concise",
            "",
            json!({"message": "!model local", "session_id": session}),
            Some(ALICE.as_str()),
        )
        .await;
    assert_eq!(meter(switched.meta()).window, None);
    let local = server
        .chat_with(
            "concise",
            "",
            json!({"message": "third", "session_id": session}),
            Some(ALICE.as_str()),
        )
        .await;
    let unknown = meter(local.meta());
    assert_eq!(
        (unknown.window, unknown.near_limit, unknown.cost),
        (None, false, None)
    );
    let (_, page) = server
        .get(
            &format!("/chat?agent=concise&session={session}"),
            Some(ALICE.as_str()),
        )
        .await;
    assert!(page.contains("tokens · limit unknown"));
}

#[tokio::test]
async fn the_meter_follows_each_call_on_file_histories() {
    the_meter_follows_each_call(None).await;
}

#[tokio::test]
async fn the_meter_follows_each_call_on_redis_histories() {
    let redis = RedisServer::start().unwrap();
    the_meter_follows_each_call(Some(&redis)).await;
}

#[tokio::test]
async fn near_the_limit_the_meter_names_what_goes_next_and_pins_stay() {
    let config = config(None);
    let path = config.path().display().to_string();
    let (_fake, server) = TestServer::with_upstream(&[
        ("PARLOR_CONFIG", &path),
        ("PARLOR_MODEL", "tiny"),
        ("DEFAULT_HISTORY_POLICY", "all"),
    ])
    .await;
    let first = server
        .chat("concise", json!({"message": "the first question"}))
        .await;
    let session = first.session_id();
    assert!(!meter(first.meta()).near_limit);
    let mut last = first;
    for i in 0..12 {
        last = server
            .chat(
                "concise",
                json!({"message": format!("question number {i} with some words"), "session_id": session}),
            )
            .await;
        if meter(last.meta()).near_limit {
            break;
        }
    }
    let near = meter(last.meta());
    assert!(near.near_limit, "200 tokens fill up: {near:?}");
    assert!(near.sent * 100 >= 200 * 80);
    assert_eq!(near.drops_next.as_deref(), Some("the first question"));

    // Pinned, the first question stays: the next to go is its reply.
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(&session).unwrap();
    let stored = history.store.load(&id).await.unwrap();
    let response = server
        .http
        .put(server.url(&format!(
            "/api/chat/concise/sessions/{session}/messages/{}",
            stored[0].id()
        )))
        .json(&json!({"send": "always"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let next = server
        .chat(
            "concise",
            json!({"message": "one more", "session_id": session}),
        )
        .await;
    let near = meter(next.meta());
    assert!(near.near_limit);
    assert_eq!(near.drops_next.as_deref(), Some(stored[1].text.as_str()));
}
