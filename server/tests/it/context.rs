//! Context blocks with per-block retention, over real HTTP: what the upstream receives turn
//! after turn for each `display`/`save` combination, on every backend and across a restart,
//! what stays stored, and every bad input refused before anything is stored or sent.

use crate::support::{config_file, TestServer};
use fake_llm::redis_server::RedisServer;
use fake_llm::FakeLlm;
use parlor_domain::context::Part;
use parlor_domain::{ConversationId, Message};
use serde_json::{json, Value};

/// A 1×1 PNG.
const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==";

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

/// The context the upstream received in one request: each text block (headers left out)
/// and `image` for each image, from every user message, oldest first.
fn context_seen(request: &Value) -> Vec<String> {
    let mut seen = Vec::new();
    for message in request["messages"].as_array().unwrap() {
        let Some(parts) = message["content"].as_array() else {
            continue;
        };
        // The first part is the user's own text.
        for part in &parts[1..] {
            match part["type"].as_str() {
                Some("image_url") => seen.push("image".to_owned()),
                _ => {
                    let t = part["text"].as_str().unwrap();
                    if !t.starts_with("[Context from ") {
                        seen.push(t.to_owned());
                    }
                }
            }
        }
    }
    seen
}

/// One combination of the spec: the entries sent with the first message, and the blocks the
/// model must receive on each of five turns.
struct Case {
    name: &'static str,
    entries: Value,
    seen: [&'static [&'static str]; 5],
    /// The block texts still stored after the fifth turn.
    kept: &'static [&'static str],
}

fn cases() -> Vec<Case> {
    let entry = |source: &str, t: &str, display: bool, save: Value| json!({"source": source, "blocks": [text(t)], "display": display, "save": save});
    vec![
        Case {
            name: "display only",
            entries: json!([{"source": "screen", "blocks": [text("D")]}]),
            seen: [&["D"], &[], &[], &[], &[]],
            kept: &[],
        },
        Case {
            name: "saved 1",
            entries: json!([entry("log", "S1", true, json!(1))]),
            seen: [&["S1"], &["S1"], &[], &[], &[]],
            kept: &[],
        },
        Case {
            name: "saved 2",
            entries: json!([entry("log", "S2", true, json!(2))]),
            seen: [&["S2"], &["S2"], &["S2"], &[], &[]],
            kept: &[],
        },
        Case {
            name: "saved 3",
            entries: json!([entry("log", "S3", true, json!(3))]),
            seen: [&["S3"], &["S3"], &["S3"], &["S3"], &[]],
            kept: &[],
        },
        Case {
            name: "saved for good",
            entries: json!([entry("notes", "F", true, json!(true))]),
            seen: [&["F"], &["F"], &["F"], &["F"], &["F"]],
            kept: &["F"],
        },
        Case {
            name: "saved, not displayed",
            entries: json!([entry("notes", "H", false, json!(2))]),
            seen: [&[], &["H"], &["H"], &[], &[]],
            kept: &[],
        },
        Case {
            name: "mixed in one source",
            entries: json!([
                entry("ide", "A", true, json!(1)),
                entry("ide", "B", true, json!(3))
            ]),
            seen: [&["A", "B"], &["A", "B"], &["B"], &["B"], &[]],
            kept: &[],
        },
        Case {
            name: "two sources",
            entries: json!([
                entry("s1", "X", true, json!(1)),
                {"source": "s2", "blocks": [text("Y"), {"type": "image", "url": PNG}], "save": true},
            ]),
            seen: [
                &["X", "Y", "image"],
                &["X", "Y", "image"],
                &["Y", "image"],
                &["Y", "image"],
                &["Y", "image"],
            ],
            kept: &["Y"],
        },
    ]
}

/// Where a run keeps its conversations: the same place across the restart.
struct Backend {
    name: &'static str,
    data: tempfile::TempDir,
    config: Option<tempfile::NamedTempFile>,
    _redis: Option<RedisServer>,
    survives_restart: bool,
}

impl Backend {
    fn file() -> Backend {
        Backend {
            name: "file",
            data: tempfile::tempdir().unwrap(),
            config: None,
            _redis: None,
            survives_restart: true,
        }
    }

    fn memory() -> Backend {
        Backend {
            name: "memory",
            data: tempfile::tempdir().unwrap(),
            config: Some(config_file(
                "[[histories]]\nid = \"default\"\nbackend = { type = \"memory\" }\n",
            )),
            _redis: None,
            survives_restart: false,
        }
    }

    fn redis() -> Backend {
        let redis = RedisServer::start().unwrap();
        Backend {
            name: "redis",
            data: tempfile::tempdir().unwrap(),
            config: Some(crate::support::redis_history(&redis.url(), "ctx:")),
            _redis: Some(redis),
            survives_restart: true,
        }
    }

    async fn start(&self, fake: &FakeLlm) -> TestServer {
        let base = fake.base_url();
        let data = self.data.path().display().to_string();
        let mut vars = vec![
            ("OPENAI_BASE_URL", base.as_str()),
            ("PARLOR_DATA_DIR", data.as_str()),
        ];
        let config = self.config.as_ref().map(|f| f.path().display().to_string());
        if let Some(config) = &config {
            vars.push(("PARLOR_CONFIG", config));
        }
        TestServer::start(&vars).await
    }
}

async fn stored(server: &TestServer, session: &str) -> Vec<Message> {
    let history = server.services.histories.get("default").unwrap();
    history
        .store
        .load(&ConversationId::parse(session).unwrap())
        .await
        .unwrap()
}

fn stored_block_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| &m.context)
        .filter_map(|b| match &b.part {
            Part::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Follows every case's conversation over five turns (restarting Parlor after the third
/// where the backend keeps data), checking what the upstream received on each turn and
/// what remains stored.
async fn follow_every_case(backend: Backend) {
    let fake = FakeLlm::start().await.unwrap();
    let cases = cases();
    let mut server = backend.start(&fake).await;
    let mut sessions: Vec<Option<String>> = vec![None; cases.len()];
    for turn in 0..5 {
        if turn == 3 && backend.survives_restart {
            drop(server);
            server = backend.start(&fake).await;
        }
        for (case, session) in cases.iter().zip(&mut sessions) {
            let mut body = json!({"message": format!("turn {turn}"), "session_id": session});
            if turn == 0 {
                body["context"] = case.entries.clone();
            }
            let reply = server.chat("general", body).await;
            assert_eq!(reply.status, 200, "{}: {}", case.name, reply.body);
            assert!(
                reply.error().is_none(),
                "{}: {:?}",
                case.name,
                reply.error()
            );
            *session = Some(reply.session_id());
            let requests = fake.requests();
            let seen = context_seen(requests.last().unwrap());
            assert_eq!(
                seen, case.seen[turn],
                "{} on {}: what the model received on turn {turn}",
                case.name, backend.name
            );
        }
    }
    for (case, session) in cases.iter().zip(&sessions) {
        let messages = stored(&server, session.as_deref().unwrap()).await;
        assert_eq!(messages.len(), 10, "{}: nothing else is removed", case.name);
        assert_eq!(
            stored_block_texts(&messages),
            case.kept,
            "{} on {}: what remains stored",
            case.name,
            backend.name
        );
    }
}

#[tokio::test]
async fn each_save_and_display_combination_over_five_turns_in_a_file_history() {
    follow_every_case(Backend::file()).await;
}

#[tokio::test]
async fn each_save_and_display_combination_over_five_turns_in_memory() {
    follow_every_case(Backend::memory()).await;
}

#[tokio::test]
async fn each_save_and_display_combination_over_five_turns_in_redis() {
    follow_every_case(Backend::redis()).await;
}

#[tokio::test]
async fn pruned_blocks_are_gone_from_the_files_and_the_report_says_what_went() {
    let (_fake, server) = TestServer::with_upstream(&[]).await;
    let secret = "secret-screen-content";
    let first = server
        .chat(
            "general",
            json!({"message": "look", "context": [{"source": "screen", "blocks": [text(secret)], "save": 1}]}),
        )
        .await;
    let session = first.session_id();
    let report = first
        .meta()
        .history
        .context
        .clone()
        .expect("a context report");
    assert_eq!(report.current.len(), 1);
    assert_eq!(report.current[0].turns_left, Some(1));
    assert!(report.current[0].displayed && report.current[0].stored);

    let second = server
        .chat(
            "general",
            json!({"message": "and now?", "session_id": session}),
        )
        .await;
    let report = second
        .meta()
        .history
        .context
        .clone()
        .expect("held from history");
    assert_eq!(report.held.len(), 1);
    assert_eq!(
        report.held[0].turns_left,
        Some(0),
        "not sent after this turn"
    );
    assert!(report.pruned.is_empty());

    let third = server
        .chat(
            "general",
            json!({"message": "third", "session_id": session}),
        )
        .await;
    let report = third
        .meta()
        .history
        .context
        .clone()
        .expect("pruning reported");
    assert_eq!(report.pruned.len(), 1);
    assert_eq!(report.pruned[0].source, "screen");
    assert_eq!(
        report.pruned[0].label,
        format!("{} characters", secret.len())
    );
    // The debug JSON says the same.
    let (status, body) = server
        .get(
            &format!("/api/chat/general/debug?session_id={session}"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let debug: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        debug["last_turn"]["history"]["context"]["pruned"][0]["source"],
        "screen"
    );
    // Nothing in the conversation's folder holds it any more.
    for entry in walk(&server.data.path().join(".chat-history").join(&session)) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} still holds the pruned block",
            entry.display()
        );
    }
    assert_eq!(
        server.stored(&session)[0].text,
        "look",
        "the user's text stays"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test]
async fn bad_context_is_refused_with_a_clear_message_and_nothing_is_stored_or_sent() {
    let (fake, server) = TestServer::with_upstream(&[]).await;
    let with = |context: Value| json!({"message": "hi", "context": context});
    let cases = [
        (
            with(json!([{"source": "s", "blocks": []}])),
            "context[0].blocks is empty",
        ),
        (
            with(json!([{"source": "", "blocks": [text("t")]}])),
            "context[0].source must be 1 to 64 printable characters",
        ),
        (
            with(json!([{"source": "x".repeat(65), "blocks": [text("t")]}])),
            "context[0].source",
        ),
        (
            with(json!([{"source": "s", "blocks": [text("t")], "save": -1}])),
            "negative",
        ),
        (
            with(json!([{"source": "s", "blocks": [text("t")], "save": 1.5}])),
            "whole number",
        ),
        (
            with(json!([{"source": "s", "blocks": [text("t")], "save": "2"}])),
            "whole number",
        ),
        (
            with(json!([{"source": "s", "blocks": [text("t")], "keep": 2}])),
            "unknown field `keep`",
        ),
        (
            with(json!([{"source": "s", "blocks": [{"type": "video", "url": "x"}]}])),
            "unknown variant `video`",
        ),
        (
            with(
                json!([{"source": "s", "blocks": [{"type": "image", "url": "https://example.com/a.png"}]}]),
            ),
            "context[0].blocks[0] is not a valid image",
        ),
        (
            with(
                json!([{"source": "s", "blocks": [{"type": "image", "url": "data:image/jpeg;base64,iVBORw0KGgo="}]}]),
            ),
            "not of the type it declares",
        ),
        (
            with(json!({"source": "s"})),
            "invalid type: map, expected a sequence",
        ),
        (
            json!({"message": "!help", "context": [{"source": "s", "blocks": [text("t")]}]}),
            "context cannot go with a ! command",
        ),
    ];
    for (body, expected) in cases {
        let reply = server.chat("general", body.clone()).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert!(
            reply.json_error().contains(expected),
            "{body}: {}",
            reply.json_error()
        );
    }
    // Regenerate with context, in a conversation that exists.
    let ok = server.chat("general", json!({"message": "hi"})).await;
    let session = ok.session_id();
    let before = fake.requests().len();
    let reply = server
        .chat(
            "general",
            json!({"session_id": session, "regenerate": true, "context": [{"source": "s", "blocks": [text("t")]}]}),
        )
        .await;
    assert_eq!(reply.status, 400);
    assert!(reply.json_error().contains("not with regenerate"));
    assert_eq!(fake.requests().len(), before, "nothing sent");
    assert_eq!(
        server.dialog_count(),
        1,
        "only the valid conversation was stored"
    );
    assert_eq!(server.stored(&session).len(), 2);
}

/// A `data:` URL of a PNG padded to about `bytes` bytes.
fn big_png(bytes: usize) -> String {
    let mut data = String::from(&PNG["data:image/png;base64,".len()..PNG.len() - 2]);
    data.truncate(64);
    data.push_str(&"A".repeat(bytes.div_ceil(4) * 4));
    format!("data:image/png;base64,{data}")
}

#[tokio::test]
async fn requests_with_images_may_be_larger_up_to_the_configured_limit() {
    let (fake, server) =
        TestServer::with_upstream(&[("PARLOR_MAX_CONTEXT_BYTES", "3000000")]).await;
    // Plain messages keep the 1 MiB limit, context text included.
    let big_text = server
        .chat(
            "general",
            json!({"message": "hi", "context": [{"source": "log", "blocks": [text(&"x".repeat(1_200_000))]}]}),
        )
        .await;
    assert_eq!(big_text.status, 413, "{}", big_text.body);
    assert!(big_text
        .json_error()
        .contains("only chat requests with images may be larger"));
    // An image of 2 MB goes through and reaches the model as an image part.
    let image = big_png(2_000_000);
    let ok = server
        .chat(
            "general",
            json!({"message": "see", "context": [{"source": "screen", "blocks": [{"type": "image", "url": image}]}]}),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let sent = fake.requests();
    let parts = sent.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .clone();
    assert_eq!(parts[2]["image_url"]["url"], image);
    // Over the configured limit: 413.
    let too_big = server
        .chat(
            "general",
            json!({"message": "see", "context": [{"source": "screen", "blocks": [{"type": "image", "url": big_png(3_100_000)}]}]}),
        )
        .await;
    assert_eq!(too_big.status, 413);
    assert!(too_big.json_error().contains("PARLOR_MAX_CONTEXT_BYTES"));
}

#[tokio::test]
async fn a_model_without_vision_gets_a_placeholder_and_the_report_says_so() {
    let config = config_file("[[models]]\nname = \"text-only\"\nvision = false\n");
    let path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[("PARLOR_CONFIG", &path)]).await;
    let switch = server
        .chat("general", json!({"message": "!model text-only"}))
        .await;
    let session = switch.session_id();
    let reply = server
        .chat(
            "general",
            json!({"session_id": session, "message": "see", "context": [{"source": "screen", "blocks": [{"type": "image", "url": PNG}]}]}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let request = fake.requests().pop().unwrap();
    assert_eq!(request["model"], "text-only");
    let body = request.to_string();
    assert!(!body.contains("image_url"), "{body}");
    assert!(
        body.contains(parlor_domain::plan::IMAGE_PLACEHOLDER),
        "{body}"
    );
    let report = reply.meta().history.context.clone().unwrap();
    assert!(report.images_withheld);
}

#[tokio::test]
async fn the_mirror_names_the_context_blocks_it_received() {
    let server = TestServer::start(&[]).await;
    let reply = server
        .chat(
            "general",
            json!({"message": "what do you see?", "context": [
                {"source": "screen", "blocks": [text("a stack trace"), {"type": "image", "url": PNG}]}
            ]}),
        )
        .await;
    let text = reply.text();
    assert!(
        text.contains("context from “screen”: text “a stack trace” image (image/png)"),
        "{text}"
    );
}

#[tokio::test]
async fn pruning_reaches_back_beyond_the_tail_a_policy_reads_from_redis() {
    // `stateless` sends no history, so a turn reads only the newest messages from Redis;
    // pruning must still find and remove the block saved four turns back.
    let backend = Backend::redis();
    let fake = FakeLlm::start().await.unwrap();
    let server = backend.start(&fake).await;
    let first = server
        .chat(
            "stateless",
            json!({"message": "q0", "context": [{"source": "log", "blocks": [text("L")], "save": 3}]}),
        )
        .await;
    let session = first.session_id();
    let mut stored_blocks = Vec::new();
    for turn in 1..6 {
        let reply = server
            .chat(
                "stateless",
                json!({"message": format!("q{turn}"), "session_id": session}),
            )
            .await;
        assert_eq!(reply.status, 200);
        stored_blocks.push(stored_block_texts(&stored(&server, &session).await));
    }
    // Kept for the three turns after its own, pruned before the fourth.
    assert_eq!(
        stored_blocks,
        [vec!["L"], vec!["L"], vec!["L"], vec![], vec![]],
        "the block is stored until its time is up"
    );
}

#[tokio::test]
async fn operator_providers_add_context_every_turn_and_a_failing_one_never_fails_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("parlor.toml");
    std::fs::write(
        &config,
        "[[context]]\nid = \"clock\"\nkind = \"time\"\ntime_zone = \"UTC\"\n\n\
         [[context]]\nid = \"notes\"\nkind = \"file\"\npath = \"notes.md\"\nmax_bytes = 100\nsave = 1\n",
    )
    .unwrap();
    let agents = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(agents.path().join("ops")).unwrap();
    std::fs::write(
        agents.path().join("ops/template.json"),
        json!({
            "agentId": "ops", "name": "Ops",
            "nodes": ["llm.openai"], "nodeConfigurations": {"llm.openai": {"model": "m"}},
            "chatSettings": {"context": ["clock", "notes"]},
        })
        .to_string(),
    )
    .unwrap();
    let (config, agents_dir) = (
        config.display().to_string(),
        agents.path().display().to_string(),
    );
    let (fake, server) = TestServer::with_upstream(&[
        ("PARLOR_CONFIG", &config),
        ("PARLOR_AGENTS_DIR", &agents_dir),
    ])
    .await;

    // The notes file is missing: the turn goes on with the clock, and says why.
    let first = server.chat("ops", json!({"message": "hi"})).await;
    assert_eq!(first.status, 200);
    assert!(first.error().is_none(), "{:?}", first.error());
    let seen = context_seen(&fake.requests()[0]);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("Current date and time: "), "{seen:?}");
    assert!(seen[0].ends_with("(time zone UTC, UTC+00:00)"), "{seen:?}");
    let report = first.meta().history.context.clone().unwrap();
    assert_eq!(report.failed[0].source, "notes");
    assert!(report.failed[0].error.contains("cannot read"), "{report:?}");
    // The clock is displayed, not saved: nothing of it is stored.
    let session = first.session_id();
    assert!(server.stored(&session)[0].context.is_empty());

    // Now the file exists: it is read on this turn, saved for one more.
    std::fs::write(dir.path().join("notes.md"), "deploy freeze today").unwrap();
    let second = server
        .chat("ops", json!({"message": "status?", "session_id": session}))
        .await;
    assert!(second
        .meta()
        .history
        .context
        .clone()
        .unwrap()
        .failed
        .is_empty());
    let seen = context_seen(&fake.requests()[1]);
    assert!(seen.contains(&"deploy freeze today".to_owned()), "{seen:?}");
    // Re-read at every turn: the new content is sent, the saved old one too (save = 1).
    std::fs::write(dir.path().join("notes.md"), "freeze lifted").unwrap();
    server
        .chat("ops", json!({"message": "and now?", "session_id": session}))
        .await;
    let seen = context_seen(&fake.requests()[2]);
    assert!(seen.contains(&"deploy freeze today".to_owned()), "{seen:?}");
    assert!(seen.contains(&"freeze lifted".to_owned()), "{seen:?}");
}

#[tokio::test]
async fn the_summary_processor_sends_the_summary_in_place_of_what_the_window_left_out() {
    let config = config_file("[history]\nchain = [\"sliding_window\", \"summary\"]\n");
    let path = config.path().display().to_string();
    let (fake, server) = TestServer::with_upstream(&[("PARLOR_CONFIG", &path)]).await;
    // `concise` keeps the last two turns.
    let first = server.chat("concise", json!({"message": "q0"})).await;
    let session = first.session_id();
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(&session).unwrap();
    history
        .store
        .put_summary(
            &id,
            &json!({"version": 1, "facts": ["the user likes Rust"]}),
        )
        .await
        .unwrap();
    let system_texts = |request: &Value| -> Vec<String> {
        request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "system")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    server
        .chat("concise", json!({"message": "q1", "session_id": session}))
        .await;
    let systems = system_texts(&fake.requests()[1]);
    assert_eq!(
        systems.len(),
        1,
        "nothing left out yet: the prompt only: {systems:?}"
    );
    // The third turn leaves the first one out.
    server
        .chat("concise", json!({"message": "q2", "session_id": session}))
        .await;
    // The chat's request (the summarizer may call the upstream too, in the background).
    let request = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.to_string().contains("q2") && !r.to_string().contains("rolling summary"))
        .unwrap();
    let systems = system_texts(&request);
    assert_eq!(systems.len(), 2, "{systems:?}");
    assert!(systems[1].starts_with(parlor_domain::summary::SUMMARY_LABEL));
    assert!(systems[1].contains(r#""facts":["the user likes Rust"]"#));
    // Right after the prompt, before the conversation.
    assert_eq!(request["messages"][1]["content"], systems[1]);
}

/// A message the pruning pass removes (written by another tool with no text of its own, its
/// blocks expired) takes no version with it: those that hung off it hang off the message
/// before it (here the conversation's start).
#[tokio::test]
async fn versions_off_a_message_pruning_removes_hang_off_the_one_before() {
    versions_survive_pruning(&[]).await;
}

#[tokio::test]
async fn on_redis_versions_off_a_message_pruning_removes_hang_off_the_one_before() {
    let redis = RedisServer::start().unwrap();
    let config = crate::support::redis_history(&redis.url(), "prv:");
    let path = config.path().display().to_string();
    versions_survive_pruning(&[("PARLOR_CONFIG", &path)]).await;
}

async fn versions_survive_pruning(vars: &[(&str, &str)]) {
    let (_fake, server) = TestServer::with_upstream(vars).await;
    let first = server
        .chat(
            "general",
            json!({"message": "look", "context": [{"source": "screen", "blocks": [text("a page")], "save": 1}]}),
        )
        .await;
    let session = first.session_id();
    let history = server.services.histories.get("default").unwrap();
    let id = ConversationId::parse(&session).unwrap();
    // The question as another tool could have written it: its blocks, no text.
    let mut messages = stored(&server, &session).await;
    messages[0].text.clear();
    history.store.replace(&id, &messages).await.unwrap();
    let question = messages[0].id().into_owned();
    let mut alternative = Message::new(parlor_domain::Role::Assistant, "another answer", 9);
    alternative.ensure_id();
    let branches = parlor_domain::branch::Branches {
        branches: vec![parlor_domain::branch::Branch::new(
            Some(question.clone()),
            vec![alternative.clone()],
        )],
    };
    let change = parlor_domain::branch::Rebranch::keeping(&messages, branches);
    assert!(history.store.rebranch_if(&id, &change).await.unwrap());
    for text in ["and now?", "and then?"] {
        let turn = server
            .chat("general", json!({"message": text, "session_id": session}))
            .await;
        assert!(turn.done().is_some(), "{}", turn.body);
    }
    let path = stored(&server, &session).await;
    assert!(
        path.iter().all(|m| m.id() != question),
        "the question was pruned"
    );
    let branches = history.store.branches(&id).await.unwrap();
    assert_eq!(branches.branches.len(), 1, "the version was kept");
    assert_eq!(branches.branches[0].parent, None);
    assert_eq!(branches.branches[0].messages, vec![alternative]);
    assert!(
        branches.problems(&path).is_empty(),
        "{:?}",
        branches.problems(&path)
    );
}
