//! One call to a server over MCP: within its timeout, cancelled at the server when it
//! times out or is stopped, its answer read within the server's bounds.

use super::result;
use super::server::{Status, ToolServer};
use super::{Arguments, Outcome};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

pub(super) fn timed_out(name: &str, timeout: std::time::Duration) -> Outcome {
    Outcome::error(format!(
        "{name} did not answer within {} s (its timeout); the call was cancelled.",
        timeout.as_secs()
    ))
}

pub(super) fn stopped(name: &str) -> Outcome {
    Outcome::error(format!("{name} was cancelled: the user stopped the turn."))
}

/// A call to a server over MCP, within its timeout. A call that times out or is stopped is
/// cancelled at the server (`notifications/cancelled`, with the reason); a server whose calls
/// keep timing out is started again.
pub(super) async fn remote(
    server: &ToolServer,
    name: &str,
    tool: &str,
    arguments: Arguments,
    stop: &CancellationToken,
) -> Outcome {
    use rmcp::model::{CallToolRequest, ClientRequest};
    let spec = &server.spec;
    let Some(live) = server.live() else {
        // Its error (a command, a URL) is for admins: /readyz and the log have it.
        let why = match server.status() {
            Status::Down { retry_secs, .. } => {
                format!("it is down; Parlor starts it again in {retry_secs} s")
            }
            Status::Starting => "it is starting".into(),
            other => other.to_string(),
        };
        return Outcome::error(format!("Tool server {:?} is not running ({why}).", spec.id));
    };
    let params = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let options = rmcp::service::PeerRequestOptions::no_options();
    let mut handle = match live.peer.send_cancellable_request(request, options).await {
        Ok(handle) => handle,
        Err(e) => return failed(server, &e),
    };
    let waiting = Instant::now();
    let timeout = tokio::select! {
        answer = &mut handle.rx => {
            let waited_us = waiting.elapsed().as_micros() as u64;
            return Outcome { waited_us, ..answered(server, answer) };
        }
        _ = tokio::time::sleep(spec.timeout) => true,
        _ = stop.cancelled() => false,
    };
    if timeout {
        let reason = format!("no answer within {} s", spec.timeout.as_secs());
        cancel(handle, reason).await;
        server.timed_out();
        timed_out(name, spec.timeout)
    } else {
        cancel(handle, "the user stopped the turn".into()).await;
        stopped(name)
    }
}

type Answer = Result<
    Result<rmcp::model::ServerResult, rmcp::ServiceError>,
    tokio::sync::oneshot::error::RecvError,
>;

/// What a server's answer to a call comes to.
fn answered(server: &ToolServer, answer: Answer) -> Outcome {
    let spec = &server.spec;
    let failed_as = |why: String| {
        let why = server.fault().unwrap_or(why);
        Outcome::error(format!("Tool server {:?} failed: {why}", spec.id))
    };
    match answer {
        Ok(Ok(rmcp::model::ServerResult::CallToolResult(result))) => {
            server.answered();
            // Counted before anything is copied: a flood of items is refused as it came.
            if let Some(refused) = result::too_many(result.content.len(), spec.max_result_items) {
                return refused;
            }
            let json = serde_json::to_value(&result).unwrap_or_default();
            drop(result);
            result::read(&json, spec.max_result_bytes, spec.max_result_items)
        }
        Ok(Ok(_)) => {
            server.answered();
            failed_as("it answered something other than a tool result".into())
        }
        Ok(Err(e)) => failed(server, &e),
        Err(_) => failed_as("the connection ended".into()),
    }
}

/// A call that failed, as the user and the model read it: the server's own error for the
/// call (an MCP error) as it said it, else that the connection failed. What the transport
/// said (it may name a command or a URL) goes to the log, for admins.
fn failed(server: &ToolServer, e: &rmcp::ServiceError) -> Outcome {
    let id = &server.spec.id;
    let why = match e {
        rmcp::ServiceError::McpError(error) => format!("it refused the call: {}", error.message),
        other => {
            tracing::warn!("tool server {id:?}: a call failed: {other}");
            "the connection to it failed".to_owned()
        }
    };
    let why = server.fault().unwrap_or(why);
    Outcome::error(format!("Tool server {id:?} failed: {why}"))
}

/// Tells the server a call is abandoned, waiting at most a second (a server that does not
/// read its input must not hold the turn).
async fn cancel(handle: rmcp::service::RequestHandle<rmcp::RoleClient>, reason: String) {
    let sending = handle.cancel(Some(reason));
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sending).await;
}
