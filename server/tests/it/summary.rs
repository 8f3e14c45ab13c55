//! The rolling summary in the chat: kept current in the background after replies, sent in
//! place of what the window leaves out, shown by `!summary`, updated by `!compact`, cleared
//! by `!reset`; a failing summarizer keeps the old summary and the chat goes on.

use crate::support::{config_file, TestServer};
use parlor_domain::summary::Covers;
use parlor_domain::ConversationId;
use serde_json::{json, Value};

const CHAIN: &str = "[history]\nchain = [\"sliding_window\", \"summary\"]\n";

async fn summary_of(server: &TestServer, session: &str) -> Option<Value> {
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(session).unwrap();
    history.store.summary(&id).await.unwrap()
}

/// Waits (bounded) until the stored summary covers `messages` messages.
async fn covering(server: &TestServer, session: &str, messages: usize) -> Value {
    for _ in 0..200 {
        if let Some(summary) = summary_of(server, session).await {
            if Covers::of(&summary).messages >= messages {
                return summary;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!(
        "the summary never covered {messages} messages: {:?}",
        summary_of(server, session).await
    );
}

/// How many summarizing requests reached the test upstream.
fn summarizing_requests(fake: &fake_llm::FakeLlm) -> usize {
    let asks = |r: &&Value| {
        r["messages"][1]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("Current summary:"))
    };
    fake.requests().iter().filter(asks).count()
}

async fn say(server: &TestServer, session: &str, text: &str) -> crate::support::Reply {
    say_as(server, "concise", session, text).await
}

async fn say_as(
    server: &TestServer,
    agent: &str,
    session: &str,
    text: &str,
) -> crate::support::Reply {
    let reply = server
        .chat(agent, json!({"message": text, "session_id": session}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
}

/// A Parlor whose chain has the summary, and a conversation of three turns (Alpha., Beta.,
/// Gamma.): the first turn falls out of the window, so the summary comes to cover it.
async fn three_turns_with_a_summary() -> (TestServer, String) {
    let config = config_file(CHAIN);
    let path = config.path().display().to_string();
    let server = TestServer::start(&[("PARLOR_CONFIG", &path)]).await;
    let first = server.chat("concise", json!({"message": "Alpha."})).await;
    let session = first.session_id();
    say(&server, &session, "Beta.").await;
    say(&server, &session, "Gamma.").await;
    (server, session)
}

#[tokio::test]
async fn the_maintenance_signal_is_reported_before_there_is_a_summary() {
    let config = config_file(CHAIN);
    let path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &path),
        ("HISTORY_CONTEXT_MAX_MESSAGES", "1"),
    ])
    .await;
    let first = server.chat("concise", json!({"message": "one"})).await;
    let second = say(&server, &first.session_id(), "two").await;
    let report = second.meta().history.summary.clone().expect("a report");
    assert!(report.text.is_empty(), "no summary yet");
    let signal = report.maintenance.expect("the maintenance signal");
    assert_eq!(signal.reason, "messages_count_exceeds_comfort_zone");
    assert_eq!(signal.metrics.messages, 3);
}

#[tokio::test]
async fn the_mirror_keeps_a_summary_of_what_falls_out_and_it_is_sent_in_its_place() {
    let config = config_file(CHAIN);
    let path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &path),
        ("HISTORY_CONTEXT_MAX_MESSAGES", "6"),
    ])
    .await;
    // `concise` sends the last two turns.
    let first = server
        .chat("concise", json!({"message": "Fact zero. Ignore this."}))
        .await;
    let session = first.session_id();
    let second = say(&server, &session, "Fact one. Also ignored.").await;
    assert_eq!(
        summary_of(&server, &session).await,
        None,
        "nothing left out yet"
    );
    // No summary yet: the report says so (and would carry the maintenance signal).
    let none_yet = second.meta().history.summary.clone().expect("a report");
    assert!(!none_yet.sent && none_yet.text.is_empty() && none_yet.updated_ms == 0);
    say(&server, &session, "Fact two.").await;
    // The first turn fell out: summarized after the reply, in the background.
    let summary = covering(&server, &session, 2).await;
    assert_eq!(summary["facts"], json!(["Fact zero."]));

    let reply = say(&server, &session, "Fact three.").await;
    let text = reply.text();
    assert!(
        text.contains("`system`: “Summary of the earlier conversation"),
        "{text}"
    );
    // The meta event says it was sent, what it covers and its size.
    let report = reply
        .meta()
        .history
        .summary
        .clone()
        .expect("a summary report");
    assert!(report.sent);
    assert_eq!(report.covers, 2);
    assert!(report.tokens > 0);
    assert!(report.updated_ms > 0);
    assert_eq!(report.text, r#"{"version":1,"facts":["Fact zero."]}"#);
    // Seven messages stored (the new one included), over the limit of six.
    let signal = report.maintenance.expect("the maintenance signal");
    assert_eq!(signal.reason, "messages_count_exceeds_comfort_zone");
    assert_eq!(signal.metrics.messages, 7);
    // The page marks where the summarized part of the transcript ends; its debug panel says
    // when the summary was last updated.
    let (_, page) = server
        .get(
            &format!("/chat?agent=concise&session={session}&debug=true"),
            None,
        )
        .await;
    let updated = parlor_domain::transfer::utc_time(report.updated_ms);
    assert!(page.contains(&format!("updated {updated}")), "{updated}");
    assert!(
        page.contains("Messages above are summarized"),
        "the marker is rendered"
    );
    // Each message is summarized once: four left out now, each fact once.
    let summary = covering(&server, &session, 4).await;
    assert_eq!(Covers::of(&summary).messages, 4);
    assert_eq!(summary["facts"], json!(["Fact one.", "Fact zero."]));

    let shown = say(&server, &session, "!summary").await;
    let notice = shown.notice().unwrap();
    assert!(
        notice.starts_with("Summary of 4 earlier message(s):"),
        "{notice}"
    );
    assert!(notice.contains("Fact one."), "{notice}");
    assert!(
        !notice.contains("covers"),
        "the coverage record is Parlor's: {notice}"
    );
    let compact = say(&server, &session, "!compact").await;
    assert_eq!(compact.notice(), Some("The summary is up to date."));
    // Stored messages are never deleted by summarizing.
    assert_eq!(server.stored(&session).len(), 8);

    let reset = say(&server, &session, "!reset").await;
    assert!(reset.notice().unwrap().starts_with("Conversation cleared."));
    assert_eq!(
        summary_of(&server, &session).await,
        None,
        "cleared with the messages"
    );
}

#[tokio::test]
async fn compact_brings_the_summary_up_to_date_now() {
    let (server, session) = three_turns_with_a_summary().await;
    // Whether or not the background run got there first, !compact leaves it covering the
    // first turn, once. While that run is still writing (a loaded machine), !compact says so
    // and is asked again.
    let mut notice = String::new();
    for _ in 0..100 {
        let compact = say(&server, &session, "!compact").await;
        notice = compact.notice().unwrap().to_owned();
        if !notice.contains("already being updated") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        notice == "Summary updated: 2 more message(s) covered."
            || notice == "The summary is up to date.",
        "{notice}"
    );
    let summary = covering(&server, &session, 2).await;
    assert_eq!(summary["facts"], json!(["Alpha."]));
}

#[tokio::test]
async fn a_failing_summarizer_keeps_the_old_summary_and_the_chat_goes_on() {
    let config = config_file(CHAIN);
    let path = config.path().display().to_string();
    // The current summary tells the fake upstream to fail every summarizing request (the
    // chat's own requests end with the user's message, which does not).
    let (_fake, server) = TestServer::with_upstream(&[("PARLOR_CONFIG", &path)]).await;
    let first = server.chat("concise", json!({"message": "one"})).await;
    let session = first.session_id();
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(&session).unwrap();
    let old = json!({"version": 1, "facts": ["kept [status:503]"]});
    history.store.put_summary(&id, &old).await.unwrap();
    say(&server, &session, "two").await;
    let third = say(&server, &session, "three").await;
    assert_eq!(third.text(), "Echo: three");
    // The background run fails after the reply.
    for _ in 0..200 {
        if server
            .services
            .summarizers
            .failure("default", &id)
            .is_some()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let notice = say(&server, &session, "!summary")
        .await
        .notice()
        .unwrap()
        .to_owned();
    assert!(
        notice.contains("The last update failed: the summarizing model failed: The model server answered with HTTP 503"),
        "{notice}"
    );
    assert_eq!(
        summary_of(&server, &session).await,
        Some(old),
        "the old summary stays"
    );
    assert_eq!(say(&server, &session, "four").await.text(), "Echo: four");
}

#[tokio::test]
async fn two_servers_on_one_redis_run_one_summarizer_per_conversation_at_a_time() {
    use parlor_domain::Message;
    use parlor_server::conversation::summarizer::{bring_up_to_date, SummarizeError};
    let redis = fake_llm::redis_server::RedisServer::start().unwrap();
    let config = config_file(&format!(
        "{CHAIN}[[histories]]\nid = \"default\"\nbackend = {{ type = \"redis\", url = \"{}\", key_prefix = \"sum:\" }}\n",
        redis.url()
    ));
    let path = config.path().display().to_string();
    let fake = fake_llm::FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let vars = [
        ("PARLOR_CONFIG", path.as_str()),
        ("OPENAI_BASE_URL", base.as_str()),
    ];
    let (a, b) = (
        TestServer::start(&vars).await,
        TestServer::start(&vars).await,
    );
    let (history_a, history_b) = (
        a.services.histories.get("default").unwrap(),
        b.services.histories.get("default").unwrap(),
    );
    let id = ConversationId::parse("shared-on-redis").unwrap();
    // The first turn makes the summarizing request slow (the fake streams 30 words, 80 ms
    // apart), so the first run still holds the conversation when the second asks for it.
    let turns = [
        Message::user("Alpha [words:30]", 1),
        Message::assistant("Echo", 2),
        Message::user("Beta", 3),
        Message::assistant("Echo", 4),
    ];
    history_a.store.append(&id, &turns).await.unwrap();
    let agent = a.services.agents.get("concise").unwrap();
    let summarizing = || summarizing_requests(&fake);

    let (first, second) = tokio::join!(
        bring_up_to_date(&a.services, history_a, &agent, (&id, None), 2, None),
        bring_up_to_date(&b.services, history_b, &agent, (&id, None), 2, None),
    );
    let busy = [&first, &second]
        .iter()
        .filter(|r| matches!(r, Err(SummarizeError::Busy)))
        .count();
    assert_eq!(busy, 1, "one run waits out: {first:?} {second:?}");
    assert_eq!(
        summarizing(),
        1,
        "one summarizing request reached the model"
    );
    // The run that went ahead asked the model (the fake's echo is not a summary, so it
    // failed and kept the old one), and released the conversation: the other process can
    // run now.
    let ran = if matches!(first, Err(SummarizeError::Busy)) {
        second
    } else {
        first
    };
    assert!(matches!(ran, Err(SummarizeError::NotJson)), "{ran:?}");
    let again = bring_up_to_date(&b.services, history_b, &agent, (&id, None), 2, None).await;
    assert!(matches!(again, Err(SummarizeError::NotJson)), "{again:?}");
    assert_eq!(summarizing(), 2);
}

/// Local accounts with a daily quota of `tokens`, the summary in the chain, the test
/// upstream; bob's login cookie.
async fn with_quota(
    tokens: &str,
) -> (
    fake_llm::FakeLlm,
    TestServer,
    tempfile::NamedTempFile,
    String,
) {
    quota_and_chain(tokens, CHAIN).await
}

/// As [`with_quota`], with `config` as the configuration file.
async fn quota_and_chain(
    tokens: &str,
    config: &str,
) -> (
    fake_llm::FakeLlm,
    TestServer,
    tempfile::NamedTempFile,
    String,
) {
    let fake = fake_llm::FakeLlm::start().await.unwrap();
    let (base, config) = (fake.base_url(), config_file(config));
    let path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_AUTH", "local"),
        ("PARLOR_CONFIG", &path),
        ("OPENAI_BASE_URL", &base),
        ("PARLOR_TOKENS_PER_DAY", tokens),
    ])
    .await;
    crate::accounts::add_users(&server).await;
    let bob = crate::accounts::cookie_of(&server, "bob").await;
    (fake, server, config, bob)
}

#[tokio::test]
async fn summaries_count_against_the_daily_quota() {
    let (fake, server, _config, bob) = with_quota("1000000").await;
    let headers = [("cookie", bob.as_str())];
    let mut session = serde_json::Value::Null;
    let mut turns = 0;
    for text in ["Alpha.", "Beta.", "Gamma."] {
        let body = json!({"message": text, "session_id": session});
        let reply = server
            .chat_request("concise", "", body, None, &headers)
            .await;
        let usage = reply.done().and_then(|d| d.usage.clone()).expect("usage");
        turns += usage.prompt_tokens + usage.completion_tokens;
        session = json!(reply.session_id());
    }
    let summarizing = || summarizing_requests(&fake);
    let used = || crate::accounts::used_today(&server, &bob);
    // The background summarizer asked the model: its tokens are counted too (the fake's
    // answer is no summary, so the run failed; the model was paid for all the same).
    let mut counted = 0;
    for _ in 0..200 {
        counted = used().await;
        if summarizing() > 0 && counted > turns {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(
        summarizing() > 0 && counted > turns,
        "turns {turns}, counted {counted}"
    );
    // `!compact` runs the same summarizer with the same count (see
    // `compact_counts_against_the_daily_quota`).
}

#[tokio::test]
async fn compact_counts_against_the_daily_quota() {
    // No summary processor: nothing runs in the background, so only `!compact` asks.
    let (fake, server, _config, bob) = quota_and_chain("1000000", "").await;
    let headers = [("cookie", bob.as_str())];
    let mut session = serde_json::Value::Null;
    let mut turns = 0;
    for text in ["Alpha.", "Beta.", "Gamma."] {
        let body = json!({"message": text, "session_id": session});
        let reply = server
            .chat_request("concise", "", body, None, &headers)
            .await;
        let usage = reply.done().and_then(|d| d.usage.clone()).expect("usage");
        turns += usage.prompt_tokens + usage.completion_tokens;
        session = json!(reply.session_id());
    }
    let used = || crate::accounts::used_today(&server, &bob);
    assert_eq!(used().await, turns);
    assert_eq!(summarizing_requests(&fake), 0);
    let body = json!({"message": "!compact", "session_id": session});
    let compact = server
        .chat_request("concise", "", body, None, &headers)
        .await;
    let notice = compact.notice().unwrap_or_default();
    assert!(notice.starts_with("Summary updated"), "{}", compact.body);
    assert_eq!(summarizing_requests(&fake), 1, "!compact asked the model");
    let after = used().await;
    assert!(after > turns, "turns {turns}, with !compact {after}");
}

#[tokio::test]
async fn a_summarys_cost_is_the_conversations_too() {
    let fake = fake_llm::FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let config = config_file(&format!(
        "{CHAIN}[[models]]\nname = \"quick\"\nmodel = \"gpt-4o-mini\"\nprice_in = 0.15\nprice_out = 0.60\n"
    ));
    let path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &path),
        ("OPENAI_BASE_URL", &base),
        ("PARLOR_MODEL", "quick"),
    ])
    .await;
    let first = server.chat("concise", json!({"message": "Alpha."})).await;
    let session = first.session_id();
    say(&server, &session, "Beta.").await;
    say(&server, &session, "Gamma.").await;
    // The background summarizer's calls are priced and kept with the summary.
    let spent = || async {
        summary_of(&server, &session)
            .await
            .map_or(0, |s| Covers::of(&s).spent_nano_usd)
    };
    let mut before = 0;
    for _ in 0..200 {
        before = spent().await;
        if before > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(before > 0, "{:?}", summary_of(&server, &session).await);
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(&session).unwrap();
    let stored_cost = || async {
        let info = history.store.info(&id).await.unwrap();
        info.unwrap().spent_nano_usd
    };
    let turns = stored_cost().await;
    // The next call's meter shows the conversation's cost with the summary's.
    let next = say(&server, &session, "Delta.").await;
    let shown = next
        .meta()
        .meter
        .clone()
        .unwrap()
        .cost
        .unwrap()
        .conversation_nano_usd;
    let after = spent().await;
    assert!(
        (turns + before..=turns + after).contains(&shown),
        "turns {turns}, summary {before}..{after}, shown {shown}"
    );
    // What is stored with the conversation stays the turns' own (the summary keeps its own).
    let stored = stored_cost().await;
    let done = next.done().unwrap().meter.clone().unwrap().cost.unwrap();
    assert_eq!(stored, turns + done.turn_nano_usd.unwrap());
}

#[tokio::test]
async fn compact_is_refused_once_the_daily_quota_is_used_up() {
    let (fake, server, _config, bob) = with_quota("5").await;
    let headers = [("cookie", bob.as_str())];
    let first = server
        .chat_request(
            "concise",
            "",
            json!({"message": "Alpha beta gamma."}),
            None,
            &headers,
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let asked = fake.requests().len();
    let body = json!({"message": "!compact", "session_id": first.session_id()});
    let compact = server
        .chat_request("concise", "", body, None, &headers)
        .await;
    let notice = compact.notice().unwrap_or_default().to_owned();
    assert!(notice.contains("quota of 5 tokens is used up"), "{notice}");
    assert_eq!(fake.requests().len(), asked, "the model was not asked");
}

/// A window of 6 that cuts 4 at a time, the summary after it: the summary is brought up to
/// each cut ahead of it (after the turn before), so the prompt's prefix changes only on the
/// turns that cut, never on the turn after a cut for a summary written late.
#[tokio::test]
async fn the_summary_changes_with_the_cut_not_a_turn_after_it() {
    let fake = fake_llm::FakeLlm::start().await.unwrap();
    let base = fake.base_url();
    let config = config_file(&format!(
        "{CHAIN}[[models]]\nname = \"small\"\nmodel = \"gpt-4o-mini\"\nmax_context = 6\n\
         window_step = 4\n"
    ));
    let path = config.path().display().to_string();
    let server = TestServer::start(&[
        ("PARLOR_CONFIG", &path),
        ("OPENAI_BASE_URL", &base),
        ("PARLOR_MODEL", "small"),
    ])
    .await;
    let mut first = Some(server.chat("general", json!({"message": "Turn 1."})).await);
    let session = first.as_ref().unwrap().session_id();
    let debug = || async {
        let url = format!("/api/chat/general/debug?session_id={session}");
        let (_, body) = server.get(&url, None).await;
        serde_json::from_str::<Value>(&body).unwrap()["last_turn"].clone()
    };
    // The window sees 2k-1 messages at turn k: it cuts at turns 4, 6 and 8 (to 4, 8, 12);
    // after turns 3, 5 and 7 the summary is brought up to the coming cut.
    let covers_after = [0, 0, 4, 4, 8, 8, 12, 12];
    let mut cut_at = 0;
    let mut changes = Vec::new();
    for turn in 1..=8 {
        let reply = match first.take() {
            Some(reply) => reply,
            None => say_as(&server, "general", &session, &format!("Turn {turn}.")).await,
        };
        let first_sent = reply.meta().history.first_sent_index;
        let report = debug().await;
        let change = report["prefix_change"]["reason"]
            .as_str()
            .map(str::to_owned);
        changes.push((turn, first_sent, change.clone()));
        if first_sent != cut_at {
            cut_at = first_sent;
        } else {
            assert_eq!(change, None, "turn {turn} did not cut: {changes:?}");
        }
        let wanted = covers_after[turn - 1];
        if wanted > 0 {
            covering(&server, &session, wanted).await;
        }
    }
    let cuts: Vec<usize> = changes.iter().map(|(_, first, _)| *first).collect();
    assert_eq!(cuts, [0, 0, 0, 4, 4, 8, 8, 12], "{changes:?}");
    // Each cut turn already had the summary of what it cut.
    let summary = summary_of(&server, &session).await.unwrap();
    assert_eq!(Covers::of(&summary).messages, 12);
}

/// Choosing a version says what became of the rolling summary: set aside when the path no
/// longer holds the messages it covers, restored when they come back, kept otherwise.
#[tokio::test]
async fn choosing_a_version_says_whether_the_summary_went_or_came_back() {
    let (server, session) = three_turns_with_a_summary().await;
    let before = covering(&server, &session, 2).await;
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(&session).unwrap();
    let original = history.store.load(&id).await.unwrap();
    // An edit of the first question takes what the summary covers off the path.
    let edit = json!({"session_id": session, "message": "Alpha again.", "edit": original[0].id()});
    let edited = server.chat("concise", edit).await;
    assert!(edited.done().is_some(), "{}", edited.body);
    let choose = |message: String| {
        let url = format!("/api/chat/concise/sessions/{session}/messages/{message}/choose");
        let request = server.http.post(server.url(&url)).json(&json!({}));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    // Back to the first version: its summary comes back with it, as it was.
    let back = choose(original[0].id().into_owned()).await;
    assert_eq!(back["summary"], "restored", "{back}");
    assert_eq!(summary_of(&server, &session).await, Some(before.clone()));
    // The edited version again: the summary is set aside (it describes the other one).
    let now = history.store.load(&id).await.unwrap();
    assert_eq!(now, original);
    let branches = history.store.branches(&id).await.unwrap();
    let again = branches.branches[0].messages[0].id().into_owned();
    let away = choose(again).await;
    assert_eq!(away["summary"], "set aside", "{away}");
    let covered = summary_of(&server, &session)
        .await
        .map(|s| Covers::of(&s).messages);
    assert!(covered.unwrap_or(0) == 0, "{covered:?}");
    // A choice that leaves the covered messages where they are keeps it.
    let same = choose(original[0].id().into_owned()).await;
    assert_eq!(same["summary"], "restored", "{same}");
    let last_reply = original.last().unwrap().id().into_owned();
    let kept = choose(last_reply).await;
    assert_eq!(kept["summary"], "kept", "{kept}");
}
