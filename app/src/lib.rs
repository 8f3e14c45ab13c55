//! Parlor's user interface: server-rendered Leptos pages that hydrate in the browser.
#![recursion_limit = "256"]

pub mod actions;
mod answers;
pub mod api;
pub mod attach;
pub mod components;
pub mod events;
pub mod pages;
#[cfg(feature = "ssr")]
pub mod ssr;
pub mod start;
pub mod state;
pub mod stream;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::{
    components::{Route, Router, Routes},
    SsrMode, StaticSegment,
};

/// The HTML document around every page.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    ssr::set_content_security_policy(&options);
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <link rel="icon" href="/favicon.svg" type="image/svg+xml"/>
                <link rel="stylesheet" id="parlor" href=format!("/{}/parlor.css", options.site_pkg_dir)/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options islands=true/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Title text="Parlor"/>
        <Router>
            <Routes fallback=|| view! { <pages::NotFound/> }>
                <Route path=StaticSegment("") view=pages::HomePage ssr=SsrMode::Async/>
                <Route path=StaticSegment("chat") view=pages::ChatPage ssr=SsrMode::InOrder/>
            </Routes>
        </Router>
    }
}
