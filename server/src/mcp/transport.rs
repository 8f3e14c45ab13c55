//! How the tools are reached: stdio (`parlor mcp --stdio`), or `/mcp` on the web server.

use super::{for_history, HistoryTools};
use serde_json::{json, Value};

/// Serves the tools on stdin/stdout until the client closes stdin.
pub async fn serve_stdio(tools: HistoryTools) -> anyhow::Result<()> {
    serve_lines(tools, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves the tools on a line-delimited JSON-RPC stream. A line that is not JSON gets a
/// JSON-RPC parse error (the SDK would drop it silently) and the server goes on; every
/// line the client sends otherwise reaches the SDK as is.
pub async fn serve_lines(
    tools: HistoryTools,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let (sdk_read, sdk_write) = tokio::io::split(theirs);
    let (from_sdk, mut to_sdk) = tokio::io::split(ours);
    let output = std::sync::Arc::new(tokio::sync::Mutex::new(output));
    // Replies from the SDK go out whole lines at a time, so a parse error never lands in
    // the middle of one.
    let replies = {
        let output = output.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(from_sdk).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut out = output.lock().await;
                if out.write_all(format!("{line}\n").as_bytes()).await.is_err()
                    || out.flush().await.is_err()
                {
                    break;
                }
            }
        })
    };
    let requests = tokio::spawn(async move {
        let mut lines = BufReader::new(input).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim().is_empty() {
                continue;
            }
            if let Err(e) = serde_json::from_str::<Value>(&line) {
                let error = json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("Parse error: {e}")}});
                let mut out = output.lock().await;
                let _ = out.write_all(format!("{error}\n").as_bytes()).await;
                let _ = out.flush().await;
                continue;
            }
            if to_sdk
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
        // The client closed its side: so does the SDK's.
        let _ = to_sdk.shutdown().await;
    });
    let running = tools.serve((sdk_read, sdk_write)).await?;
    running.waiting().await?;
    requests.abort();
    let _ = replies.await;
    Ok(())
}

/// `/mcp`: the same tools over streamable HTTP, only when `PARLOR_MCP_TOKEN` is set. The
/// gate lets through only requests carrying the token (`Authorization: Bearer …`; 401
/// otherwise, counted as a guess). A `Host` or `Origin` that is not this server's (loopback,
/// or `PARLOR_PUBLIC_URL`'s) is refused with 403, so a web page cannot reach it through DNS
/// rebinding. `None` when it is off.
pub fn http<S>(
    config: &crate::config::Config,
    histories: &crate::store::histories::Histories,
) -> Option<axum::Router<S>>
where
    S: Clone + Send + Sync + 'static,
{
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    config.mcp_token.as_ref()?;
    let tools = match for_history(histories, "default", config) {
        Ok(tools) => tools,
        Err(e) => {
            tracing::error!("PARLOR_MCP_TOKEN is set but /mcp stays off: {e}");
            return None;
        }
    };
    let (hosts, origins) = this_server(config.public_url.as_deref());
    let mut server_config = StreamableHttpServerConfig::default();
    server_config.allowed_hosts = hosts;
    server_config.allowed_origins = origins;
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        LocalSessionManager::default().into(),
        server_config,
    );
    assert!(crate::table::declared("/mcp").is_some());
    Some(axum::Router::new().nest_service("/mcp", service))
}

/// The `Host` names and the `Origin`s that are this server's: loopback (any port for an
/// origin: a local client chooses its own), and `PARLOR_PUBLIC_URL`'s exact origin.
fn this_server(public_url: Option<&str>) -> (Vec<String>, Vec<String>) {
    const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];
    let mut hosts: Vec<String> = LOOPBACK.into_iter().map(str::to_owned).collect();
    let mut origins: Vec<String> = LOOPBACK
        .into_iter()
        .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
        .collect();
    if let Some(url) = public_url.and_then(|url| reqwest::Url::parse(url).ok()) {
        if let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) {
            hosts.push(host.to_owned());
            origins.push(format!("{}://{host}:{port}", url.scheme()));
        }
    }
    (hosts, origins)
}

#[cfg(test)]
mod tests {
    use super::this_server;

    #[test]
    fn only_loopback_and_the_public_address_are_this_server() {
        let (hosts, origins) = this_server(Some("https://chat.example.com"));
        assert!(hosts.contains(&"chat.example.com".to_owned()));
        assert!(origins.contains(&"https://chat.example.com:443".to_owned()));
        assert!(origins.contains(&"http://127.0.0.1:*".to_owned()));
        let (hosts, _) = this_server(None);
        assert_eq!(hosts, ["localhost", "127.0.0.1", "[::1]"]);
        let (hosts, _) = this_server(Some("not a url"));
        assert_eq!(hosts.len(), 3);
    }
}
