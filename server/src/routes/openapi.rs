//! `GET /api/openapi.json`: the OpenAPI document of Parlor's HTTP API (`utoipa`). The chat
//! stream is described as `text/event-stream` whose events are the `ChatEvent` types.

use super::ready::Readiness;
use axum::Json;
use parlor_domain::chain::StepReport;
use parlor_domain::meter::{Cost, Meter, MeterParts};
use parlor_domain::settings::SettingSource;
use parlor_domain::{
    ApiError, ChatEvent, ChatRequest, DebugInfo, DoneEvent, HistoryReport, MarkReply, MarkRequest,
    MarksReport, MetaEvent, Rendered, Role, SendMark, SettingsReport, TurnReport, Usage,
};
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Parlor",
        description = "A self-hosted web chat for LLM agents: the chat API, the debug panel's \
                       facts, and the operator's endpoints."
    ),
    paths(
        super::chat::post_chat,
        super::debug::get_debug,
        super::messages::get_older,
        super::messages::put_mark,
        super::messages::post_choose,
        super::tool_calls::post_answer,
        super::stop::post_stop,
        super::conversations::post_fork,
        super::conversations::patch_conversation,
        super::conversations::delete_conversation,
        super::conversations::get_export,
        super::conversations::post_import,
        super::conversations::get_search,
        crate::routes::accounts::tokens::get_account,
        crate::routes::accounts::tokens::get_tokens,
        crate::routes::accounts::tokens::post_token,
        crate::routes::accounts::tokens::delete_token,
        super::tool_secrets::get_secrets,
        super::tool_secrets::put_secrets,
        crate::routes::accounts::login::post_login,
        crate::routes::accounts::login::post_logout,
        super::healthz,
        super::ready::get_ready,
        super::metrics::get_metrics,
        get_openapi,
    ),
    modifiers(&AdminToken),
    components(schemas(
        ChatRequest, ChatEvent, MetaEvent, HistoryReport, SettingsReport, SettingSource,
        StepReport, Rendered, DoneEvent, Usage, ApiError, DebugInfo, TurnReport, Readiness,
        MarkRequest, MarkReply, parlor_domain::branch::ChooseReply, parlor_domain::branch::Versions, MarksReport, SendMark, Role, Meter, MeterParts, Cost,
        super::conversations::ForkRequest, super::conversations::RenameRequest,
        super::conversations::Deleted, super::conversations::SearchResults,
        crate::conversation::Summary, crate::conversation::Hit,
        super::tool_calls::ApprovalAnswer, super::tool_calls::ApprovalRecorded,
        super::stop::Stopped,
        parlor_domain::event::ToolCallEvent, parlor_domain::event::ToolResultEvent,
        parlor_domain::event::ApprovalEvent, parlor_domain::event::LimitEvent,
        parlor_domain::message::ToolCall, parlor_domain::message::ToolAnswer,
        crate::routes::accounts::tokens::AccountView, crate::routes::accounts::tokens::TokenView,
        crate::routes::accounts::tokens::NewToken, crate::routes::accounts::tokens::MadeToken,
        crate::routes::accounts::login::LoginRequest,
        super::tool_secrets::ServerSecrets, super::tool_secrets::SecretState,
        parlor_domain::event::UnavailableEvent,
    ))
)]
pub struct ApiDoc;

/// The operator's admin token, sent as a bearer token (`/metrics`).
struct AdminToken;

impl utoipa::Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json"))
)]
pub async fn get_openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
