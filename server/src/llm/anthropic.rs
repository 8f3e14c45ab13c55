//! Anthropic's Messages API, streamed: the thin adapter beside the OpenAI one.
//!
//! Parlor decides what is sent and where the provider caches it: the system prompt goes in
//! its own field, the conversation alternates user and assistant from a user message (same
//! role neighbours merged, as the `role_alternation` processor does, whether or not the
//! chain has it), tool exchanges become `tool_use` / `tool_result` blocks, `max_tokens` is
//! always set, and `cache_control` breakpoints close the tools, the system prompt, the
//! previous call's request and the newest message ([`parlor_domain::cache`]). Usage is read
//! with the cache's share: `prompt_tokens` counts every input token, `cached_tokens` those
//! read from the cache and `cache_write_tokens` those written to it.

use super::endpoint::{HttpClient, KeyHeader, Wire};
use super::errors::{lenient_count, lenient_optional};
use super::sse::{Piece, Protocol};
use super::{LlmError, LlmEvent, ModelRequest, ToolChoice};
use crate::config::ApiKey;
use parlor_domain::block::Part;
use parlor_domain::tool::calls::{Assembler, Piece as CallPiece};
use parlor_domain::{Message, Role, Usage};
use serde::Deserialize;
use serde_json::{json, Value};

/// The API version Parlor speaks.
const VERSION: &str = "2023-06-01";
/// `max_tokens` when neither the agent nor the model sets one (the API requires it).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Messages protocol (`POST {base_url}/messages`, the key in `x-api-key`).
pub struct Messages;

pub type AnthropicClient = HttpClient<Messages>;

impl Wire for Messages {
    const PATH: &'static str = "/messages";
    const HEADERS: &'static [(&'static str, &'static str)] = &[("anthropic-version", VERSION)];
    const KEY_HEADER: KeyHeader = KeyHeader::Named("x-api-key");
    const SETTING: &'static str = "the provider's base_url";
    type Reader = Events;

    fn body(request: &ModelRequest) -> Value {
        request_body(request)
    }

    fn reader(key: Option<ApiKey>) -> Events {
        Events {
            key,
            ..Events::default()
        }
    }
}

/// The Messages body of a request.
pub(super) fn request_body(request: &ModelRequest) -> Value {
    let cached = parlor_domain::cache::message_breakpoints(&request.messages);
    let mut system: Vec<Value> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, message) in request.messages.iter().enumerate() {
        if message.role == Role::System {
            system.extend(text_block(&message.text));
            continue;
        }
        let (role, mut blocks) = wire_blocks(message);
        if cached.contains(&i) {
            mark(&mut blocks);
        }
        match turns.last_mut() {
            Some((last, previous)) if *last == role => previous.extend(blocks),
            // Replies before the first user message cannot be placed.
            None if role == "assistant" => {}
            _ => turns.push((role, blocks)),
        }
    }
    mark(&mut system);
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, mut content)| {
            if content.is_empty() {
                content.extend(text_block("(empty)"));
            }
            json!({"role": role, "content": content})
        })
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t.clamp(0.0, 1.0));
    }
    add_tools(&mut body, request);
    body
}

/// The offered tools, the last one closing a cached part, and the choice among them.
fn add_tools(body: &mut Value, request: &ModelRequest) {
    if request.tools.is_empty() {
        return;
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| {
            let schema = match &t.parameters {
                Value::Object(_) => t.parameters.clone(),
                _ => json!({"type": "object", "properties": {}}),
            };
            json!({"name": t.name, "description": t.description, "input_schema": schema})
        })
        .collect();
    mark(&mut tools);
    body["tools"] = json!(tools);
    let offered = |name: &str| request.tools.iter().any(|t| t.name == name);
    let choice = match &request.tool_choice {
        None | Some(ToolChoice::Auto) => return,
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::None) => json!({"type": "none"}),
        Some(ToolChoice::Tool(name)) if offered(name) => json!({"type": "tool", "name": name}),
        Some(ToolChoice::Tool(_)) => return,
    };
    body["tool_choice"] = choice;
}

/// Asks the provider to cache everything up to the last of `blocks`.
fn mark(blocks: &mut [Value]) {
    if let Some(last) = blocks.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
}

/// A text block, none for empty text (the API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// An image block: a data URL's bytes inline, any other URL by reference.
fn image_block(url: &str) -> Value {
    let inline = url.strip_prefix("data:").and_then(|rest| {
        let (media_type, data) = rest.split_once(";base64,")?;
        Some(json!({"type": "base64", "media_type": media_type, "data": data}))
    });
    let source = inline.unwrap_or_else(|| json!({"type": "url", "url": url}));
    json!({"type": "image", "source": source})
}

/// The blocks of a message's text and context (headers and text parts as text).
fn content_blocks(message: &Message) -> Vec<Value> {
    let parts = message.context.iter().map(|block| match &block.part {
        Part::Image { url } => Some(image_block(url)),
        part => text_block(&part.sent_text().unwrap_or_default()),
    });
    text_block(&message.text)
        .into_iter()
        .chain(parts.flatten())
        .collect()
}

/// A message as its role on the wire and its blocks: a tool result is the user's
/// `tool_result`, a call the assistant's `tool_use` (its arguments as JSON; arguments that
/// are not an object go as `{"arguments": <text>}`), a tool message without a call the
/// assistant's text.
fn wire_blocks(message: &Message) -> (&'static str, Vec<Value>) {
    if let Some(answer) = &message.tool {
        let mut content = content_blocks(message);
        if content.is_empty() {
            content.extend(text_block("(no output)"));
        }
        let mut result = json!({
            "type": "tool_result",
            "tool_use_id": answer.tool_call_id,
            "content": content,
        });
        if !answer.ok {
            result["is_error"] = json!(true);
        }
        return ("user", vec![result]);
    }
    let role = match message.role {
        Role::User => "user",
        _ => "assistant",
    };
    let mut blocks = content_blocks(message);
    for call in &message.tool_calls {
        let input = match serde_json::from_str::<Value>(&call.arguments) {
            Ok(Value::Object(map)) => Value::Object(map),
            _ if call.arguments.trim().is_empty() => json!({}),
            _ => json!({"arguments": call.arguments}),
        };
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    (role, blocks)
}

/// Reads the stream's events: text and tool-use blocks by index, usage from `message_start`
/// and `message_delta`, the stop reason, `error` events.
#[derive(Default)]
pub struct Events {
    usage: StreamUsage,
    stop_reason: Option<String>,
    calls: Assembler,
    /// Which content blocks are tool calls (by index).
    tool_blocks: std::collections::BTreeSet<u64>,
    finished: bool,
    key: Option<ApiKey>,
}

#[derive(Default, Deserialize)]
struct StreamUsage {
    #[serde(default, deserialize_with = "lenient_count")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "lenient_count")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "lenient_optional")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_optional")]
    cache_read_input_tokens: Option<u64>,
}

impl StreamUsage {
    /// Later counts replace earlier ones (`message_delta` repeats them, cumulative).
    fn update(&mut self, later: StreamUsage) {
        if later.input_tokens > 0 {
            self.input_tokens = later.input_tokens;
        }
        self.output_tokens = self.output_tokens.max(later.output_tokens);
        self.cache_creation_input_tokens = later
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
    }

    fn usage(&self) -> Usage {
        let read = self.cache_read_input_tokens;
        let written = self.cache_creation_input_tokens;
        let prompt = self
            .input_tokens
            .saturating_add(read.unwrap_or(0))
            .saturating_add(written.unwrap_or(0));
        Usage {
            prompt_tokens: prompt,
            completion_tokens: self.output_tokens,
            total_tokens: prompt.saturating_add(self.output_tokens),
            cached_tokens: read,
            cache_write_tokens: written,
        }
    }
}

/// One event, as far as Parlor reads it.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: Value,
    },
    ContentBlockDelta {
        index: u64,
        delta: Value,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: Value,
        #[serde(default)]
        usage: Option<StreamUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartedMessage {
    #[serde(default)]
    usage: Option<StreamUsage>,
}

impl Protocol for Events {
    fn read(&mut self, event: &eventsource_stream::Event) -> Piece {
        let data = event.data.trim();
        if data.is_empty() {
            return Piece::Nothing;
        }
        match serde_json::from_str::<Event>(data) {
            Ok(event) => self.apply(event),
            Err(e) => {
                let detail = format!("a stream event is not valid JSON: {e}");
                Piece::Last(Err(LlmError::Malformed { detail }))
            }
        }
    }

    fn closed(&mut self) -> Result<LlmEvent, LlmError> {
        match self.finished {
            true => Ok(self.finish()),
            false => Err(LlmError::Dropped),
        }
    }
}

impl Events {
    fn apply(&mut self, event: Event) -> Piece {
        match event {
            Event::MessageStart { message } => {
                self.usage.update(message.usage.unwrap_or_default());
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                if content_block["type"] == "tool_use" {
                    self.tool_blocks.insert(index);
                    self.calls.add(CallPiece {
                        index,
                        id: content_block["id"].as_str().map(str::to_owned),
                        name: content_block["name"].as_str().map(str::to_owned),
                        arguments: None,
                    });
                } else if let Some(text) = content_block["text"].as_str().filter(|t| !t.is_empty())
                {
                    return Piece::Text(text.to_owned());
                }
            }
            Event::ContentBlockDelta { index, delta } => return self.delta(index, &delta),
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_owned());
                }
                self.usage.update(usage.unwrap_or_default());
            }
            Event::MessageStop {} => {
                self.finished = true;
                return Piece::Last(Ok(self.finish()));
            }
            Event::Error { error } => {
                let message = error["message"]
                    .as_str()
                    .unwrap_or("an error without a message");
                let kind = error["type"].as_str().unwrap_or("error");
                let message = super::redact::redact(
                    &format!("{message} ({kind})"),
                    self.key.as_ref().map(ApiKey::expose),
                );
                return Piece::Last(Err(LlmError::Upstream { message }));
            }
            Event::ContentBlockStop {} | Event::Ping {} | Event::Other => {}
        }
        Piece::Nothing
    }

    fn delta(&mut self, index: u64, delta: &Value) -> Piece {
        match delta["type"].as_str() {
            Some("text_delta") => match delta["text"].as_str() {
                Some(text) if !text.is_empty() => return Piece::Text(text.to_owned()),
                _ => {}
            },
            Some("input_json_delta") if self.tool_blocks.contains(&index) => {
                self.calls.add(CallPiece {
                    index,
                    arguments: delta["partial_json"].as_str().map(str::to_owned),
                    ..CallPiece::default()
                });
            }
            // Thinking, signatures and citations are not shown.
            _ => {}
        }
        Piece::Nothing
    }

    /// The finished event: the stop reason in Parlor's (OpenAI's) words.
    fn finish(&mut self) -> LlmEvent {
        let reason = match self.stop_reason.take().as_deref() {
            Some("max_tokens") => "length".to_owned(),
            Some("tool_use") => "tool_calls".to_owned(),
            Some("end_turn" | "stop_sequence") | None => "stop".to_owned(),
            Some(other) => other.to_owned(),
        };
        let mut tool_calls = std::mem::take(&mut self.calls).finish();
        for call in &mut tool_calls {
            if call.arguments.is_empty() {
                call.arguments = "{}".into();
            }
        }
        LlmEvent::Finished {
            reason,
            usage: Some(self.usage.usage().bounded()),
            tool_calls,
        }
    }
}

#[cfg(test)]
mod tests;
