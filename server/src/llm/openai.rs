//! An OpenAI-compatible Chat Completions client with streaming.
//!
//! Works with OpenAI and the servers that speak its API (Ollama, llama.cpp's server, vLLM,
//! LiteLLM). Every fault becomes an [`LlmError`] whose message a person can act on; the API
//! key is sent only in the `Authorization` header and scrubbed from any text shown to users.

use super::endpoint::{HttpClient, KeyHeader, Wire};
use super::errors::{lenient_count, lenient_optional};
use super::sse::{Piece, Protocol};
use super::{LlmError, LlmEvent, ModelRequest, ToolChoice};
use crate::config::ApiKey;
use parlor_domain::context::Part;
use parlor_domain::tool::calls::{Assembler, Piece as CallPieceOf};
use parlor_domain::{Message, Role, Usage};
use serde::Deserialize;
use serde_json::json;

/// The Chat Completions protocol (`POST {base_url}/chat/completions`, the key as a bearer
/// token).
pub struct ChatCompletions;

pub type OpenAiClient = HttpClient<ChatCompletions>;

impl Wire for ChatCompletions {
    const PATH: &'static str = "/chat/completions";
    const HEADERS: &'static [(&'static str, &'static str)] = &[];
    const KEY_HEADER: KeyHeader = KeyHeader::Bearer;
    const SETTING: &'static str = "OPENAI_BASE_URL";
    type Reader = Chunks;

    fn body(request: &ModelRequest) -> serde_json::Value {
        request_body(request)
    }

    fn reader(key: Option<ApiKey>) -> Chunks {
        Chunks {
            finish_reason: None,
            usage: None,
            scrub_key: key,
            calls: Assembler::default(),
        }
    }
}

#[derive(Deserialize)]
struct StreamChunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<UpstreamUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// Usage as OpenAI-compatible servers report it (cached tokens under
/// `prompt_tokens_details`).
#[derive(Deserialize)]
struct UpstreamUsage {
    #[serde(default, deserialize_with = "lenient_count")]
    prompt_tokens: u64,
    #[serde(default, deserialize_with = "lenient_count")]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default, deserialize_with = "lenient_optional")]
    cached_tokens: Option<u64>,
}

impl From<UpstreamUsage> for Usage {
    fn from(u: UpstreamUsage) -> Usage {
        Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: 0,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            cache_write_tokens: None,
        }
        .bounded()
    }
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    /// Absent, or `null` (llama.cpp's server sends `"tool_calls": null` in every chunk).
    #[serde(default)]
    tool_calls: Option<Vec<CallPiece>>,
}

/// A piece of a streamed tool call: `index` says which call it belongs to.
#[derive(Deserialize)]
struct CallPiece {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionPiece>,
}

impl From<CallPiece> for CallPieceOf {
    fn from(piece: CallPiece) -> Self {
        let (name, arguments) = match piece.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        CallPieceOf {
            index: piece.index,
            id: piece.id,
            name,
            arguments,
        }
    }
}

#[derive(Deserialize)]
struct FunctionPiece {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// The Chat Completions body of a request: streamed, with usage, and the tools offered.
fn request_body(request: &ModelRequest) -> serde_json::Value {
    let messages: Vec<_> = request.messages.iter().map(wire_message).collect();
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = request.max_tokens {
        body["max_tokens"] = json!(n);
    }
    if !request.tools.is_empty() {
        let tools: Vec<_> = request
            .tools
            .iter()
            .map(|t| {
                let parameters = match &t.parameters {
                    serde_json::Value::Object(_) => t.parameters.clone(),
                    _ => json!({"type": "object", "properties": {}}),
                };
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": parameters,
                }})
            })
            .collect();
        body["tools"] = json!(tools);
        let offered = |name: &str| request.tools.iter().any(|t| t.name == name);
        match &request.tool_choice {
            None | Some(ToolChoice::Auto) => {}
            Some(ToolChoice::Required) => body["tool_choice"] = json!("required"),
            Some(ToolChoice::None) => body["tool_choice"] = json!("none"),
            Some(ToolChoice::Tool(name)) if offered(name) => {
                body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
            }
            Some(ToolChoice::Tool(_)) => {}
        }
    }
    body
}

/// One message as Chat Completions takes it: an exchange's call with its `tool_calls`, its
/// results as `tool` messages naming their call. A `tool` message without a call (written by
/// another tool) is passed as the assistant's.
fn wire_message(m: &Message) -> serde_json::Value {
    if let Some(answer) = &m.tool {
        let text: String = m.texts().collect::<Vec<_>>().concat();
        let images = m.images();
        let text = match images {
            0 => text,
            n => format!("{text}\n[{n} image(s) in this result]"),
        };
        return json!({"role": "tool", "tool_call_id": answer.tool_call_id, "content": text});
    }
    let role = match m.role {
        Role::Tool => "assistant",
        other => other.as_str(),
    };
    if m.tool_calls.is_empty() {
        return json!({"role": role, "content": content(m)});
    }
    let calls: Vec<_> = m
        .tool_calls
        .iter()
        .map(|c| {
            json!({"id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    // A string, empty when the call came without text: OpenAI takes `null` too, but
    // llama.cpp's server refuses anything but a string.
    json!({"role": "assistant", "content": m.text, "tool_calls": calls})
}

/// Reads Chat Completions chunks: text deltas, tool-call pieces, the finish reason and usage.
pub struct Chunks {
    finish_reason: Option<String>,
    usage: Option<Usage>,
    scrub_key: Option<ApiKey>,
    calls: Assembler,
}

impl Protocol for Chunks {
    fn read(&mut self, event: &eventsource_stream::Event) -> Piece {
        self.read_data(event.data.trim())
    }

    /// The stream closed. Some servers close without `[DONE]`; a reported finish reason
    /// suffices.
    fn closed(&mut self) -> Result<LlmEvent, LlmError> {
        match self.finish_reason.take() {
            Some(reason) => Ok(LlmEvent::Finished {
                reason,
                usage: self.usage.take(),
                tool_calls: std::mem::take(&mut self.calls).finish(),
            }),
            None => Err(LlmError::Dropped),
        }
    }
}

impl Chunks {
    /// What one event's data brings.
    fn read_data(&mut self, data: &str) -> Piece {
        if data.is_empty() {
            return Piece::Nothing;
        }
        if data == "[DONE]" {
            let reason = self.finish_reason.take().unwrap_or_else(|| "stop".into());
            let usage = self.usage.take();
            let tool_calls = std::mem::take(&mut self.calls).finish();
            return Piece::Last(Ok(LlmEvent::Finished {
                reason,
                usage,
                tool_calls,
            }));
        }
        let chunk: StreamChunk = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                let detail = format!("a stream chunk is not valid JSON: {e}");
                return Piece::Last(Err(LlmError::Malformed { detail }));
            }
        };
        if let Some(error) = chunk.error {
            let message = error
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            let key = self.scrub_key.as_ref().map(|k| k.expose());
            let message = super::redact::redact(&message, key);
            return Piece::Last(Err(LlmError::Upstream { message }));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        let mut text = String::new();
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(content) = delta.content {
                text.push_str(&content);
            }
            for piece in delta.tool_calls.into_iter().flatten() {
                self.calls.add(piece.into());
            }
        }
        match text.is_empty() {
            true => Piece::Nothing,
            false => Piece::Text(text),
        }
    }
}

/// A message's `content`: its text, or for a message with context blocks, content parts
/// (text parts for its text, headers and text blocks; `image_url` parts for images).
fn content(message: &Message) -> serde_json::Value {
    if message.context.is_empty() {
        return json!(message.text);
    }
    let mut parts = vec![json!({"type": "text", "text": message.text})];
    for block in &message.context {
        parts.push(match &block.part {
            Part::Image { url } => json!({"type": "image_url", "image_url": {"url": url}}),
            part => json!({"type": "text", "text": part.sent_text().unwrap_or_default()}),
        });
    }
    json!(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::offered;
    use futures::StreamExt;
    use parlor_domain::message::ToolCall;
    use std::time::Duration;

    #[test]
    fn a_delta_with_nulls_for_what_it_lacks_is_read() {
        // llama-cpp-python's first chunk of a forced tool call.
        let delta: Delta = serde_json::from_str(
            r#"{"role": "assistant", "content": null, "function_call": null, "tool_calls": null}"#,
        )
        .unwrap();
        assert!(delta.content.is_none() && delta.tool_calls.is_none());
        let delta: Delta = serde_json::from_str(
            r#"{"tool_calls": [{"index": 0, "id": "c", "function": {"name": "n", "arguments": null}}]}"#,
        )
        .unwrap();
        assert_eq!(delta.tool_calls.unwrap().len(), 1);
    }

    /// Reads a whole reply: its text and the finished event's calls.
    async fn reply(client: &OpenAiClient, request: ModelRequest) -> (String, Vec<ToolCall>) {
        let mut stream = client.stream(request).await.unwrap();
        let mut text = String::new();
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                LlmEvent::Delta(piece) => text.push_str(&piece),
                LlmEvent::Finished { tool_calls, .. } => return (text, tool_calls),
            }
        }
        panic!("no finished event")
    }

    #[tokio::test]
    async fn streamed_calls_are_assembled_and_results_go_back_paired() {
        let upstream = fake_llm::FakeLlm::start().await.unwrap();
        let client = OpenAiClient::new(upstream.base_url(), None, Duration::from_secs(10));
        let ask = Message::user(
            r#"[call:clock__now {"tz":"Europe/Paris","long":"abcdefghijklmnop"}] [call:clock__now {}]"#,
            1,
        );
        let request = ModelRequest {
            model: "m".into(),
            messages: vec![ask.clone()],
            temperature: None,
            max_tokens: None,
            tools: vec![offered("clock__now")],
            tool_choice: None,
        };
        let (_, calls) = reply(&client, request.clone()).await;
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(
            calls[0].arguments,
            r#"{"tz":"Europe/Paris","long":"abcdefghijklmnop"}"#
        );
        assert_eq!(calls[1].name, "clock__now");
        assert_ne!(calls[0].id, calls[1].id);
        // The exchange goes back as the provider expects, and the model reads the results.
        let mut asked = Message::assistant("", 2);
        asked.tool_calls = calls.clone();
        let results = calls.iter().enumerate().map(|(i, call)| {
            let answer = parlor_domain::message::ToolAnswer {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                ok: true,
                ms: 1,
                bytes: 5,
                removed_after: None,
            };
            let text = Part::Text {
                text: format!("time {i}"),
            };
            Message::tool_result(answer, vec![text], None, 3)
        });
        let mut messages = vec![ask, asked];
        messages.extend(results);
        let (text, calls) = reply(
            &client,
            ModelRequest {
                messages,
                ..request
            },
        )
        .await;
        assert_eq!(text, "Results: time 0; time 1");
        assert!(calls.is_empty());
        let sent = &upstream.requests()[1];
        assert_eq!(
            sent["messages"][1]["tool_calls"][0]["function"]["name"],
            "clock__now"
        );
        assert!(sent["messages"][1]["content"].is_string(), "{sent}");
        assert_eq!(sent["messages"][2]["role"], "tool");
        assert_eq!(
            sent["messages"][2]["tool_call_id"],
            sent["messages"][1]["tool_calls"][0]["id"]
        );
        assert_eq!(sent["tools"][0]["function"]["name"], "clock__now");
    }
}
