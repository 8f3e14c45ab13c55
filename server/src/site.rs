//! The site (WASM, JS, CSS and `public/` assets, with their brotli and gzip variants) embedded
//! in the release binary, so `parlor` runs from any folder with no `target/site` beside it.
//! A request for one of its files is answered from the binary (precompressed when the
//! browser accepts it); anything else goes on to the pages.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

/// Release builds embed the folder (`cargo leptos build` writes it before building the
/// server, and a missing folder is a build error); debug builds (`make dev`) read it at run
/// time, so it may not exist yet when they compile.
#[derive(rust_embed::RustEmbed)]
#[folder = "$CARGO_MANIFEST_DIR/../target/site"]
#[cfg_attr(debug_assertions, allow_missing = true)]
struct Site;

pub async fn serve_embedded(request: Request, next: Next) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return next.run(request).await;
    }
    let path = request.uri().path().trim_start_matches('/').to_owned();
    let Some(file) = (!path.is_empty()).then(|| Site::get(&path)).flatten() else {
        return next.run(request).await;
    };
    let accepts = request
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let variant = [("br", ".br"), ("gzip", ".gz")]
        .into_iter()
        .filter(|(name, _)| accepts.contains(name))
        .find_map(|(name, suffix)| Site::get(&format!("{path}{suffix}")).map(|f| (name, f)));
    let mime = file.metadata.mimetype().to_owned();
    let (data, encoding) = match variant {
        Some((name, compressed)) => (compressed.data, Some(name)),
        None => (file.data, None),
    };
    let mut response = Response::new(Body::from(data.into_owned()));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&mime) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Some(name) = encoding {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(name));
    }
    response
}
