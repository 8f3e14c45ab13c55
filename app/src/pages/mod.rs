//! One file per route.

pub mod chat;
pub mod home;

pub use chat::ChatPage;
pub use home::HomePage;

use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(axum::http::StatusCode::NOT_FOUND);
    }
    view! {
        <main class="page-message">
            <h1>"Page not found"</h1>
            <p><a href="/">"Back to the agents"</a></p>
        </main>
    }
}
