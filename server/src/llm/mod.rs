//! Models Parlor can talk to, behind one streaming interface.

mod anthropic;
pub mod endpoint;
mod errors;
mod health;
pub mod models;
pub mod providers;
pub mod sse;

mod mirror;
mod openai;
pub mod redact;

pub use anthropic::{AnthropicClient, Messages};
pub use mirror::MirrorModel;
pub use openai::{ChatCompletions, OpenAiClient};

use futures::stream::BoxStream;
use parlor_domain::{Message, Usage};

/// One call to a model.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// The tools the model may ask for on this call (none: it may not).
    pub tools: Vec<parlor_domain::tool::Offered>,
    /// Whether it must, may or may not ask for them (`None`: the provider's default).
    pub tool_choice: Option<ToolChoice>,
}

/// What a model is told about asking for the tools it is offered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// It may ask or answer (the providers' default: nothing is sent).
    #[default]
    Auto,
    /// It must ask for one of them.
    Required,
    /// It must not ask (the tools stay in the request: some gateways refuse `tool` messages
    /// without tool definitions).
    None,
    /// It must ask for this tool (its model name).
    Tool(String),
}

/// A piece of a streamed reply.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    Delta(String),
    /// The reply completed; always the last item of a successful stream.
    Finished {
        reason: String,
        usage: Option<Usage>,
        /// The tool calls the reply asks for, put together from the stream's pieces.
        tool_calls: Vec<parlor_domain::message::ToolCall>,
    },
}

pub type LlmStream = BoxStream<'static, Result<LlmEvent, LlmError>>;

/// Everything that can go wrong upstream, each with a message a person understands.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("Could not reach the model server at {host} ({detail}). Is it running, and is {setting} right?")]
    Unreachable {
        host: String,
        detail: String,
        /// Where its address is set (`OPENAI_BASE_URL`, or a provider's `base_url`).
        setting: String,
    },
    #[error("The model server did not respond within {secs} s.")]
    Timeout { secs: u64 },
    #[error("The model server answered with HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("The model server sent a reply Parlor could not read ({detail}).")]
    Malformed { detail: String },
    #[error("The connection to the model server was lost before the reply finished.")]
    Dropped,
    #[error("The model reported an error: {message}")]
    Upstream { message: String },
    #[error("Agent {agent:?} does not name a model, and PARLOR_MODEL is not set.")]
    NoModel { agent: String },
    #[error("The model's reply passed {} MiB; Parlor stopped reading it (what arrived is kept).", MAX_REPLY_BYTES >> 20)]
    TooLong,
}

/// The longest reply Parlor reads from a model (a reply of 32,000 tokens is about 128 KiB).
pub const MAX_REPLY_BYTES: usize = 2 << 20;

impl LlmError {
    /// A short name of the kind of failure, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Unreachable { .. } => "unreachable",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Http { .. } => "http",
            LlmError::Malformed { .. } => "malformed",
            LlmError::Dropped => "dropped",
            LlmError::Upstream { .. } => "upstream",
            LlmError::NoModel { .. } => "no_model",
            LlmError::TooLong => "too_long",
        }
    }
}

/// The model behind a Parlor deployment.
#[derive(Clone)]
pub enum LlmClient {
    Mirror(MirrorModel),
    OpenAi(OpenAiClient),
    Anthropic(AnthropicClient),
}

impl LlmClient {
    pub async fn stream(&self, request: ModelRequest) -> Result<LlmStream, LlmError> {
        match self {
            LlmClient::Mirror(m) => Ok(m.stream(request)),
            LlmClient::OpenAi(c) => c.stream(request).await,
            LlmClient::Anthropic(c) => c.stream(request).await,
        }
    }

    /// The provider name shown to users.
    pub fn provider(&self) -> &'static str {
        match self {
            LlmClient::Mirror(_) => "parlor (offline)",
            LlmClient::OpenAi(_) => "openai-compatible",
            LlmClient::Anthropic(_) => "anthropic",
        }
    }

    /// How its endpoint has answered (`None`: the offline model has none), for `/readyz`.
    pub fn health(&self) -> Option<String> {
        match self {
            LlmClient::Mirror(_) => None,
            LlmClient::OpenAi(c) => Some(c.health()),
            LlmClient::Anthropic(c) => Some(c.health()),
        }
    }
}

/// A tool as the clients' tests offer it: the clock's `now`, taking a time zone.
#[cfg(test)]
fn offered(name: &str) -> parlor_domain::tool::Offered {
    parlor_domain::tool::Offered {
        name: name.into(),
        server: "clock".into(),
        tool: "now".into(),
        description: "the time".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
    }
}
