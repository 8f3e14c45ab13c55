//! The site's files: the WASM, JS and CSS the pages load, and the `public/` assets.
//!
//! Pages load the build's files from `/pkg/{build}/…`, where `{build}` names the build by its
//! WASM's content. A page open across an upgrade of Parlor then cannot fetch a file of the
//! next build (the split module behind its buttons above all, which must match the WASM it
//! was loaded with): it gets a 404, which the page reports. Those files never change under
//! their path, so browsers may keep them for good.
//!
//! The release binary embeds the site (with its brotli and gzip variants), so `parlor` runs
//! from any folder with no `target/site` beside it; debug builds serve it from disk.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leptos::config::LeptosOptions;
use std::sync::Arc;

/// Where this build's files are served.
#[derive(Clone, Debug)]
pub struct SiteBuild {
    /// `/pkg/`: the folder the files are in.
    folder: Arc<str>,
    /// The build's name (16 hex digits).
    id: Arc<str>,
}

impl SiteBuild {
    /// Names the build of `options`' site and points its pages at `/{pkg}/{build}`.
    pub fn name(options: &mut LeptosOptions) -> SiteBuild {
        let wasm = format!("{}/{}.wasm", options.site_pkg_dir, options.output_name);
        let id = wasm_digest(options, &wasm)
            .map(|digest| digest[..8].iter().map(|b| format!("{b:02x}")).collect())
            // Not built yet (tests of the server alone): still one name for the process.
            .unwrap_or_else(|| "0".repeat(16));
        let build = SiteBuild {
            folder: format!("/{}/", options.site_pkg_dir).into(),
            id: Arc::from(id.as_str()),
        };
        options.site_pkg_dir = format!("{}/{id}", options.site_pkg_dir).into();
        build
    }

    /// The build's name.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The SHA-256 of the site's WASM (`path` under the site root).
fn wasm_digest(options: &LeptosOptions, path: &str) -> Option<[u8; 32]> {
    #[cfg(feature = "embed-site")]
    {
        let _ = options;
        Site::get(path).map(|file| file.metadata.sha256_hash())
    }
    #[cfg(not(feature = "embed-site"))]
    {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(std::path::Path::new(&*options.site_root).join(path)).ok()?;
        Some(Sha256::digest(&bytes).into())
    }
}

/// Serves `/pkg/{build}/{file}` as `/pkg/{file}`, for as long as browsers like; a file of
/// another build is not found. (A layer of the router runs after routing, so this rewrite
/// cannot change the route: no route is under `/pkg`, and the files are answered by the
/// embedded site's middleware or the router's fallback, which read the rewritten URI.)
pub async fn serve_build(State(build): State<SiteBuild>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let Some(rest) = path.strip_prefix(&*build.folder) else {
        return next.run(request).await;
    };
    let Some((named, file)) = rest.split_once('/') else {
        return next.run(request).await;
    };
    if named != &*build.id {
        return if is_build_id(named) {
            (StatusCode::NOT_FOUND, "not a file of this build of Parlor").into_response()
        } else {
            next.run(request).await
        };
    }
    let mut unversioned = format!("{}{file}", build.folder);
    if let Some(query) = request.uri().query() {
        unversioned.push('?');
        unversioned.push_str(query);
    }
    let Ok(uri) = unversioned.parse::<Uri>() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let (mut parts, body) = request.into_parts();
    parts.uri = uri;
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if response.status() == StatusCode::OK {
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        );
    }
    response
}

/// `/pkg/…` (after [`serve_build`]) and the files at the site's top (`public/`): one of the
/// site's files, or a plain 404. Such a path never renders the app's 404 page: anyone may
/// read the site's files, without the login or the pages' rate limit, so a made-up path
/// must cost next to nothing and show nothing.
pub async fn site_file(State(options): State<LeptosOptions>, request: Request) -> Response {
    // The release binary answered its embedded files before routing; what is left is none.
    #[cfg(feature = "embed-site")]
    let served = {
        let _ = (options, request);
        None
    };
    #[cfg(not(feature = "embed-site"))]
    let served = {
        use tower::ServiceExt;
        let files = tower_http::services::ServeDir::new(&*options.site_root);
        match files.oneshot(request).await {
            Ok(response) if response.status() != StatusCode::NOT_FOUND => {
                Some(response.into_response())
            }
            Ok(_) => None,
            Err(never) => match never {},
        }
    };
    served.unwrap_or_else(|| (StatusCode::NOT_FOUND, "no such file").into_response())
}

fn is_build_id(segment: &str) -> bool {
    segment.len() == 16 && segment.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Release builds embed the folder (`cargo leptos build` writes it before building the
/// server, and a missing folder is a build error); debug builds (`make dev`) read it at run
/// time, so it may not exist yet when they compile.
#[cfg(feature = "embed-site")]
#[derive(rust_embed::RustEmbed)]
#[folder = "$CARGO_MANIFEST_DIR/../target/site"]
#[cfg_attr(debug_assertions, allow_missing = true)]
struct Site;

/// Answers a request for one of the embedded files (precompressed when the browser accepts
/// it); anything else goes on to the pages.
#[cfg(feature = "embed-site")]
pub async fn serve_embedded(request: Request, next: Next) -> Response {
    use axum::body::Body;
    use axum::http::Method;
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return next.run(request).await;
    }
    let path = request.uri().path().trim_start_matches('/').to_owned();
    // A file's name only: `parlor.css/` is no file (the gate answers it 404).
    let named = !path.is_empty() && !path.ends_with('/');
    let Some(file) = named.then(|| Site::get(&path)).flatten() else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    fn app(build: SiteBuild) -> Router {
        // As in Parlor: no route under `/pkg`, the files are answered by the fallback.
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .fallback(|uri: Uri| async move {
                match uri.path() {
                    "/pkg/parlor.js" | "/pkg/parlor.wasm" => (StatusCode::OK, uri.to_string()),
                    _ => (StatusCode::NOT_FOUND, uri.to_string()),
                }
            })
            .layer(axum::middleware::from_fn_with_state(build, serve_build))
    }

    async fn call(app: &Router, path: &str) -> (StatusCode, Option<String>, String) {
        let response = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let cache = response
            .headers()
            .get(header::CACHE_CONTROL)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, cache, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn files_of_this_build_are_served_for_good_and_other_builds_are_not_found() {
        let mut options = LeptosOptions::builder()
            .output_name("parlor")
            .site_root("/nonexistent")
            .build();
        let build = SiteBuild::name(&mut options);
        assert_eq!(&*options.site_pkg_dir, &*format!("pkg/{}", build.id()));
        let app = app(build.clone());

        let (status, cache, body) = call(&app, &format!("/pkg/{}/parlor.js?v=1", build.id())).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "/pkg/parlor.js?v=1", "served as the unversioned file");
        assert_eq!(
            cache.as_deref(),
            Some("public, max-age=31536000, immutable")
        );

        // Another build's file (a page left open across an upgrade): not found.
        let other = if build.id() == "0123456789abcdef" {
            "fedcba9876543210"
        } else {
            "0123456789abcdef"
        };
        let (status, _, _) = call(&app, &format!("/pkg/{other}/split_parlor_actions.wasm")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // The unversioned path still works (tools, benchmarks), without the long cache.
        let (status, cache, body) = call(&app, "/pkg/parlor.wasm").await;
        assert_eq!(
            (status, cache, body.as_str()),
            (StatusCode::OK, None, "/pkg/parlor.wasm")
        );

        // A missing file of this build is not cached.
        let (status, cache, _) = call(&app, &format!("/pkg/{}/a/b.js", build.id())).await;
        assert_eq!((status, cache), (StatusCode::NOT_FOUND, None));
    }

    #[test]
    fn a_build_is_named_by_its_wasm() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        std::fs::create_dir_all(dir.join("pkg")).unwrap();
        let name = |bytes: &[u8]| {
            std::fs::write(dir.join("pkg/parlor.wasm"), bytes).unwrap();
            let mut options = LeptosOptions::builder()
                .output_name("parlor")
                .site_root(dir.to_string_lossy().into_owned())
                .build();
            SiteBuild::name(&mut options).id().to_owned()
        };
        let first = name(b"one build");
        assert!(is_build_id(&first), "{first}");
        assert_eq!(name(b"one build"), first, "the same build, the same name");
        assert_ne!(name(b"another build"), first);
    }
}
