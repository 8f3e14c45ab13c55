//! Pages are rendered whole, whoever reads them (see [`render_whole`]).

/// The most of a page rendered for a client that does not read it (a `HEAD`, or one that
/// left): past it the render is dropped.
const RENDER_MAX: usize = 16 * 1024 * 1024;

/// A page is rendered to its end whoever reads it. The connection drops a render as soon as
/// its client does not want it (a `HEAD`'s body, a client that leaves), in the middle of a
/// render whose tasks still read the page's reactive state: under load that panicked
/// ("already disposed"). So the render runs in a task of its own; a `HEAD` is answered once
/// it is whole, with `GET`'s status and headers and no body; a `GET`'s body is passed on by
/// a task that reads it to its end even when the client has left.
pub async fn render_whole(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::Method;
    use futures::StreamExt;
    let method = request.method().clone();
    if method != Method::GET && method != Method::HEAD {
        return next.run(request).await;
    }
    let Ok(response) = tokio::spawn(next.run(request)).await else {
        let failed = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
        return axum::response::IntoResponse::into_response(failed);
    };
    let (parts, body) = response.into_parts();
    if method == Method::HEAD {
        let _ = axum::body::to_bytes(body, RENDER_MAX).await;
        return axum::response::Response::from_parts(parts, axum::body::Body::empty());
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, axum::Error>>(8);
    tokio::spawn(async move {
        let (mut chunks, mut read, mut reading) = (body.into_data_stream(), 0, true);
        while let Some(chunk) = chunks.next().await {
            read += chunk.as_ref().map_or(0, |c| c.len());
            if read > RENDER_MAX {
                break;
            }
            reading = reading && tx.send(chunk).await.is_ok();
        }
    });
    let passed_on = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    axum::response::Response::from_parts(parts, axum::body::Body::from_stream(passed_on))
}
