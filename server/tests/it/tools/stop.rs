//! `POST …/stop` ends a running turn whose stream stays open (a proxy that keeps it): the
//! running call is cancelled at its server with the reason, what arrived is stored, marked
//! stopped, and the stream ends. Only who may see the conversation may stop it.

use super::approval::Streaming;
use super::chat::parlor_with;
use super::hostile::stdio;
use crate::support::browser;
use parlor_domain::{ChatEvent, ReplyStatus};
use parlor_server::tools::spec::Transport;
use serde_json::json;

#[tokio::test]
async fn stop_ends_a_turn_whose_stream_stays_open_and_cancels_its_call() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let Transport::Stdio { args, .. } = stdio(log.path(), "") else {
        unreachable!()
    };
    let extra = format!(
        "[[mcp_servers]]\nid = \"slow\"\ncommand = \"python3\"\nargs = {args:?}\n\
         timeout_secs = 60\nenv = {{ HOSTILE_LOG = {:?} }}\n",
        log.path().display().to_string()
    );
    let (server, _a, _c) = parlor_with(&extra, "never", 30, &[]).await;
    let (alice, bob) = (browser(&"a".repeat(32)), browser(&"b".repeat(32)));
    let mut turn =
        Streaming::start(&server, json!({"message": "/tool slow__hang {}"}), &alice).await;
    turn.until("tool_call").await;
    let session = turn.session_id();
    let stop = |cookie: &str| {
        server
            .http
            .post(server.url(&format!("/api/chat/timekeeper/sessions/{session}/stop")))
            .header("cookie", cookie.to_owned())
            .json(&json!({}))
            .send()
    };
    assert_eq!(
        stop(&bob).await.unwrap().status(),
        404,
        "not Bob's conversation"
    );
    let stopped = stop(&alice).await.unwrap();
    assert_eq!(stopped.status(), 200);
    // The stream ends by itself (the test still holds it open).
    let events = tokio::time::timeout(std::time::Duration::from_secs(10), turn.rest())
        .await
        .expect("the stream ends after Stop");
    let result = events
        .iter()
        .find_map(|e| match e {
            ChatEvent::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .expect("the call is answered");
    assert!(!result.ok && result.error.unwrap_or_default().contains("cancelled"));
    // The server heard why.
    let heard = || std::fs::read_to_string(log.path()).unwrap();
    for _ in 0..50 {
        if heard().contains("notifications/cancelled") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let heard = heard();
    assert!(
        heard.contains("notifications/cancelled") && heard.contains("the user stopped the turn"),
        "{heard}"
    );
    let stored = server
        .stored_eventually(&session, |m| m.iter().any(|m| m.tool.is_some()))
        .await;
    // The call, marked stopped, and its result saying it was cancelled.
    assert_eq!(stored[1].status(), Some(ReplyStatus::Stopped), "{stored:?}");
    assert!(stored[2].texts().collect::<String>().contains("cancelled"));
    assert!(parlor_domain::exchange::paired(&stored[1..]));
    // Nothing runs any more.
    assert_eq!(stop(&alice).await.unwrap().status(), 404);
}
