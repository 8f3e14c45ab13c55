//! The browser side of the chat stream: `POST /api/chat/{agent}` with `fetch`, reading the
//! server-sent events as they arrive, cancellable with an `AbortController` (Stop).
//!
//! On the server these functions are never called (event handlers only run in the
//! browser); they compile to no-ops there so components stay the same on both sides.

use crate::events::PageEvent;

/// How a stream ended, when it did not end with the server's own `done` or `error`.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEnd {
    /// The server closed the stream normally.
    Closed,
    /// The user pressed Stop.
    Aborted,
    /// The server refused the request (bad input, busy conversation…), with its message.
    Refused(String),
    /// Parlor itself could not be reached.
    Network(String),
}

/// Cancels the running request, if any. (The browser runs on one thread, so wrapping the
/// controller to make the handle `Send` is sound; on the server the handle is empty.)
#[derive(Default)]
pub struct AbortHandle {
    #[cfg(feature = "hydrate")]
    controller: Option<send_wrapper::SendWrapper<web_sys::AbortController>>,
}

impl AbortHandle {
    pub fn abort(&mut self) {
        #[cfg(feature = "hydrate")]
        if let Some(controller) = self.controller.take() {
            controller.abort();
        }
    }
}

/// Starts a chat request in the background. `on_event` sees each event; `on_end` runs once.
#[cfg(feature = "hydrate")]
pub fn spawn_chat(
    url: String,
    body: String,
    abort: &mut AbortHandle,
    mut on_event: impl FnMut(PageEvent) + 'static,
    on_end: impl FnOnce(StreamEnd) + 'static,
) {
    let controller = match web_sys::AbortController::new() {
        Ok(c) => c,
        Err(_) => {
            return on_end(StreamEnd::Network(
                "this browser cannot cancel requests".into(),
            ))
        }
    };
    let signal = controller.signal();
    abort.controller = Some(send_wrapper::SendWrapper::new(controller));
    leptos::task::spawn_local(async move {
        let end = browser::post(&url, &body, &signal, &mut on_event).await;
        on_end(end);
    });
}

#[cfg(not(feature = "hydrate"))]
pub fn spawn_chat(
    _url: String,
    _body: String,
    _abort: &mut AbortHandle,
    _on_event: impl FnMut(PageEvent) + 'static,
    _on_end: impl FnOnce(StreamEnd) + 'static,
) {
}

/// Sends a request to Parlor's API in the background (`body`: JSON); `on_done` gets the
/// response's text, or the server's reason for refusing (its `{"error"}`), or why Parlor
/// could not be reached.
#[cfg(feature = "hydrate")]
pub fn spawn_request(
    method: &'static str,
    url: String,
    body: Option<String>,
    on_done: impl FnOnce(Result<String, String>) + 'static,
) {
    leptos::task::spawn_local(async move {
        on_done(browser::request(method, &url, body).await);
    });
}

#[cfg(not(feature = "hydrate"))]
pub fn spawn_request(
    _method: &'static str,
    _url: String,
    _body: Option<String>,
    _on_done: impl FnOnce(Result<String, String>) + 'static,
) {
}

/// Reads an answer of the API as `T` with the browser's JSON parser (as the island's data is
/// read: `crate::start`), or says why it cannot.
pub fn read_answer<T: crate::start::FromJson>(reply: Result<String, String>) -> Result<T, String> {
    let text = reply?;
    #[cfg(feature = "hydrate")]
    let read = browser::parse(&text).and_then(|value| T::from_json(&value));
    #[cfg(not(feature = "hydrate"))]
    let read: Option<T> = {
        let _ = text;
        None
    };
    read.ok_or_else(|| "Parlor's answer could not be read".to_owned())
}

/// Sends a request to Parlor's API and waits for its answer (see [`spawn_request`]).
pub async fn request(
    method: &'static str,
    url: String,
    body: Option<String>,
) -> Result<String, String> {
    #[cfg(feature = "hydrate")]
    return browser::request(method, &url, body).await;
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (method, url, body);
        Err("only in the browser".into())
    }
}

/// Replaces the page URL's `key` parameter (removing it when `value` is `None`) without a
/// navigation, so a reload opens the same conversation.
pub fn set_url_param(key: &str, value: Option<&str>) {
    #[cfg(feature = "hydrate")]
    browser::set_url_param(key, value);
    #[cfg(not(feature = "hydrate"))]
    let _ = (key, value);
}

/// Opens a page of Parlor.
pub fn open(href: &str) {
    #[cfg(feature = "hydrate")]
    if let Some(window) = web_sys::window() {
        let _ = window.location().assign(href);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = href;
}

/// Loads the page again.
pub fn reload() {
    #[cfg(feature = "hydrate")]
    if let Some(window) = web_sys::window() {
        let _ = window.location().reload();
    }
}

/// Copies text to the clipboard.
pub fn copy_to_clipboard(text: &str) {
    #[cfg(feature = "hydrate")]
    if let Some(window) = web_sys::window() {
        let _ = window.navigator().clipboard().write_text(text);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = text;
}

#[cfg(feature = "hydrate")]
mod browser {
    use super::StreamEnd;
    use crate::events::PageEvent;
    use parlor_domain::event::SseDecoder;
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    pub async fn post(
        url: &str,
        body: &str,
        signal: &web_sys::AbortSignal,
        on_event: &mut dyn FnMut(PageEvent),
    ) -> StreamEnd {
        match read(url, body, signal, on_event).await {
            Ok(end) => end,
            Err(_) if signal.aborted() => StreamEnd::Aborted,
            Err(e) => StreamEnd::Network(describe(&e)),
        }
    }

    async fn read(
        url: &str,
        body: &str,
        signal: &web_sys::AbortSignal,
        on_event: &mut dyn FnMut(PageEvent),
    ) -> Result<StreamEnd, JsValue> {
        let response = gloo_net::http::Request::post(url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .abort_signal(Some(signal))
            .body(body.to_owned())
            .map_err(|e| JsValue::from_str(&e.to_string()))?
            .send()
            .await
            .map_err(|e| JsValue::from_str(&e.to_string()))?;
        if !response.ok() {
            let text = response.text().await.unwrap_or_default();
            let message = api_error(&text)
                .unwrap_or_else(|| format!("Parlor answered HTTP {}", response.status()));
            return Ok(StreamEnd::Refused(message));
        }
        let Some(stream) = response.body() else {
            return Ok(StreamEnd::Closed);
        };
        let reader: web_sys::ReadableStreamDefaultReader = stream.get_reader().dyn_into()?;
        let mut decoder = SseDecoder::default();
        loop {
            let chunk = JsFuture::from(reader.read()).await?;
            let done = js_sys::Reflect::get(&chunk, &"done".into())?
                .as_bool()
                .unwrap_or(true);
            if done {
                return Ok(StreamEnd::Closed);
            }
            let value = js_sys::Reflect::get(&chunk, &"value".into())?;
            let bytes = js_sys::Uint8Array::new(&value).to_vec();
            for data in decoder.push(&bytes) {
                if let Some(event) = parse(&data).and_then(|v| crate::events::read_event(&v)) {
                    on_event(event);
                }
            }
        }
    }

    pub async fn request(method: &str, url: &str, body: Option<String>) -> Result<String, String> {
        let builder = gloo_net::http::RequestBuilder::new(url).method(match method {
            "POST" => gloo_net::http::Method::POST,
            "PUT" => gloo_net::http::Method::PUT,
            "PATCH" => gloo_net::http::Method::PATCH,
            "DELETE" => gloo_net::http::Method::DELETE,
            _ => gloo_net::http::Method::GET,
        });
        let request = match body {
            Some(body) => builder
                .header("content-type", "application/json")
                .body(body),
            None => builder.build(),
        };
        let response = request
            .map_err(|e| e.to_string())?
            .send()
            .await
            .map_err(|e| format!("Could not reach Parlor: {e}"))?;
        let text = response.text().await.unwrap_or_default();
        if response.ok() {
            Ok(text)
        } else {
            Err(api_error(&text)
                .unwrap_or_else(|| format!("Parlor answered HTTP {}", response.status())))
        }
    }

    /// JSON parsed by the browser (read with `crate::start::Json`: no serde_json parser here).
    pub fn parse(text: &str) -> Option<JsValue> {
        js_sys::JSON::parse(text).ok()
    }

    /// The message of an API error's JSON (`{"error": …}`, see `parlor_domain::ApiError`).
    fn api_error(text: &str) -> Option<String> {
        use crate::start::Json;
        parse(text)?.get("error")?.string()
    }

    fn describe(error: &JsValue) -> String {
        error
            .dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .or_else(|| error.as_string())
            .unwrap_or_else(|| "network error".into())
    }

    pub fn set_url_param(key: &str, value: Option<&str>) {
        let Some(window) = web_sys::window() else {
            return;
        };
        let Ok(href) = window.location().href() else {
            return;
        };
        let Ok(url) = web_sys::Url::new(&href) else {
            return;
        };
        match value {
            Some(v) => url.search_params().set(key, v),
            None => url.search_params().delete(key),
        }
        if let Ok(history) = window.history() {
            let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&url.href()));
        }
    }
}
