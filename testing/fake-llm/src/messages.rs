//! Anthropic's Messages API (`POST /v1/messages`), streamed, on top of the same directives:
//! a request is checked as the real API checks it (the `anthropic-version` header,
//! `max_tokens`, no `system` role among the messages, turns that alternate from a user
//! message, a `tool_result` for each `tool_use` of the turn before, at most four
//! `cache_control` breakpoints), read as a Chat Completions request, answered by the same
//! directives, and the answer streamed as Messages events (`message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`, `ping`).
//! Usage reports the prompt cache ([`crate::cache`]); `[error-event]` streams some text and
//! then an `overloaded_error` event.

use super::{cache, Recorder, Step};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

pub(crate) async fn messages(
    axum::extract::State(recorder): axum::extract::State<Recorder>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    recorder.note_authorization(key.clone());
    recorder.note_headers(&headers);
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid JSON: {e}")),
    };
    recorder.note_request(request.clone());
    if headers.get("anthropic-version").is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "anthropic-version header is required",
        );
    }
    if let Err(why) = check(&request) {
        return error(StatusCode::BAD_REQUEST, &why);
    }
    let chat = as_chat(&request);
    let last_user = super::last_user_text(&chat);
    let model = request["model"].as_str().unwrap_or("fake-model").to_owned();
    if let Some(refused) = super::refusal(&recorder, key.as_deref(), &last_user).await {
        return refused;
    }
    let units = cache::units_of_messages(&request);
    let used = recorder
        .cache
        .lock()
        .expect("cache lock")
        .lookup(&units, true);
    let steps = super::tools::steps(&model, &chat, &last_user)
        .unwrap_or_else(|| super::steps(&model, &last_user, None));
    let mut events = vec![Step::Data(json!({"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null,
        "usage": {"input_tokens": used.fresh, "cache_read_input_tokens": used.read,
            "cache_creation_input_tokens": used.written, "output_tokens": 1},
    }}))];
    events.push(Step::Data(json!({"type": "ping"})));
    events.extend(translate(steps, last_user.contains("[error-event]")));
    super::sse_named(events)
}

/// Refuses what the real API refuses (the adapter must never send it).
fn check(request: &Value) -> Result<(), String> {
    if !request["max_tokens"].is_u64() {
        return Err("max_tokens: Field required".into());
    }
    let messages = request["messages"]
        .as_array()
        .ok_or("messages: Field required")?;
    let mut previous_uses: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        let expected = if i % 2 == 0 { "user" } else { "assistant" };
        if role != expected {
            return Err(format!(
                "messages.{i}.role: roles must alternate from \"user\" (got {role:?})"
            ));
        }
        let blocks = message["content"].as_array().cloned().unwrap_or_default();
        if blocks.is_empty() && !message["content"].is_string() {
            return Err(format!("messages.{i}.content: must not be empty"));
        }
        let of_type = |t: &str| -> Vec<String> {
            let wanted = |b: &&Value| b["type"] == t;
            let ids = blocks.iter().filter(wanted);
            ids.map(|b| {
                b["id"]
                    .as_str()
                    .or(b["tool_use_id"].as_str())
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
        };
        for text in blocks.iter().filter(|b| b["type"] == "text") {
            if text["text"].as_str().is_none_or(|t| t.trim().is_empty()) {
                return Err(format!(
                    "messages.{i}: text content blocks must be non-empty"
                ));
            }
        }
        let results = of_type("tool_result");
        if role == "user" && previous_uses.iter().any(|id| !results.contains(id)) {
            return Err(format!(
                "messages.{i}: tool_use ids were found without tool_result blocks immediately after"
            ));
        }
        previous_uses = of_type("tool_use");
    }
    let marks = request.to_string().matches("\"cache_control\"").count();
    if marks > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        ));
    }
    Ok(())
}

/// The text of a block list (`text` blocks joined).
fn texts(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The request as Chat Completions would carry it (what the directives read).
fn as_chat(request: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = request.get("system") {
        messages.push(json!({"role": "system", "content": texts(system)}));
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        let blocks = message["content"].as_array().cloned().unwrap_or_default();
        let uses: Vec<Value> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| json!({"id": b["id"], "function": {"name": b["name"], "arguments": b["input"].to_string()}}))
            .collect();
        for result in blocks.iter().filter(|b| b["type"] == "tool_result") {
            messages.push(
                json!({"role": "tool", "tool_call_id": result["tool_use_id"],
                "content": texts(&result["content"])}),
            );
        }
        let text = texts(&message["content"]);
        if !uses.is_empty() {
            messages.push(json!({"role": "assistant", "content": text, "tool_calls": uses}));
        } else if !text.is_empty() || message["content"].is_string() {
            messages.push(json!({"role": message["role"], "content": text}));
        }
    }
    let tools: Vec<Value> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| json!({"type": "function", "function": {"name": t["name"]}}))
        .collect();
    let choice = match request["tool_choice"]["type"].as_str() {
        Some("none") => json!("none"),
        _ => json!("auto"),
    };
    json!({"model": request["model"], "messages": messages, "tools": tools, "tool_choice": choice})
}

/// Chat Completions chunks as Messages events: text in block 0, each call in a block of its
/// own, the finish reason as the stop reason, `[DONE]` as `message_stop`.
fn translate(steps: Vec<Step>, error_midway: bool) -> Vec<Step> {
    let mut out = Translation::default();
    for step in steps {
        match step {
            Step::Data(chunk) => {
                if out.chunk(&chunk["choices"][0], error_midway) {
                    break;
                }
            }
            Step::Raw(raw) if raw.contains("[DONE]") => {
                out.events.push(Step::Data(json!({"type": "message_stop"})));
            }
            other => out.events.push(other),
        }
    }
    out.events
}

#[derive(Default)]
struct Translation {
    events: Vec<Step>,
    open: Option<u64>,
    output: u64,
}

impl Translation {
    /// One chunk's choice; `true` when the stream ends here (an error event).
    fn chunk(&mut self, choice: &Value, error_midway: bool) -> bool {
        let events = &mut self.events;
        if let Some(text) = choice["delta"]["content"].as_str() {
            switch(
                events,
                &mut self.open,
                0,
                json!({"type": "text", "text": ""}),
            );
            self.output += 1;
            events.push(Step::Data(
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
            ));
            if error_midway {
                let error = json!({"type": "overloaded_error", "message": "Overloaded"});
                events.push(Step::Data(json!({"type": "error", "error": error})));
                return true;
            }
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = call["index"].as_u64().unwrap_or(0) + 1;
            let block = json!({"type": "tool_use", "id": format!("toolu_{index}"),
                "name": call["function"]["name"], "input": {}});
            switch(events, &mut self.open, index, block);
            if let Some(piece) = call["function"]["arguments"]
                .as_str()
                .filter(|p| !p.is_empty())
            {
                events.push(Step::Data(
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            if let Some(index) = self.open.take() {
                events.push(Step::Data(
                    json!({"type": "content_block_stop", "index": index}),
                ));
            }
            let stop = match reason {
                "tool_calls" => "tool_use",
                "length" => "max_tokens",
                _ => "end_turn",
            };
            events.push(Step::Data(json!({"type": "message_delta",
                "delta": {"stop_reason": stop}, "usage": {"output_tokens": self.output.max(1)}})));
        }
        false
    }
}

/// Closes the open block unless it is `to`, and opens `to` with `block`.
fn switch(events: &mut Vec<Step>, open: &mut Option<u64>, to: u64, block: Value) {
    if let Some(index) = open.filter(|&i| i != to) {
        events.push(Step::Data(
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if *open != Some(to) {
        events.push(Step::Data(
            json!({"type": "content_block_start", "index": to, "content_block": block}),
        ));
        *open = Some(to);
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, Json(body)).into_response()
}
