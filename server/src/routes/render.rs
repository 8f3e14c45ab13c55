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
    let method = request.method().clone();
    if method != Method::GET && method != Method::HEAD {
        return next.run(request).await;
    }
    // All of it in the task: a client that leaves drops only the wait for its answer, never
    // a body still being rendered.
    let rendering = tokio::spawn(async move {
        let (parts, body) = next.run(request).await.into_parts();
        let body = match method == Method::HEAD {
            true => {
                let _ = axum::body::to_bytes(body, RENDER_MAX).await;
                axum::body::Body::empty()
            }
            false => passed_on(body),
        };
        axum::response::Response::from_parts(parts, body)
    });
    match rendering.await {
        Ok(response) => response,
        Err(_) => axum::response::IntoResponse::into_response(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        ),
    }
}

/// `body` as a task reads it to its end, passing it on while it is read.
fn passed_on(body: axum::body::Body) -> axum::body::Body {
    use futures::StreamExt;
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
    axum::body::Body::from_stream(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}
