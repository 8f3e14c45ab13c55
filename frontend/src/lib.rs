//! The browser entry point: hydrates the interactive islands of the server-rendered page.
#![recursion_limit = "256"]

// Link the app crate: its `#[island]` components register themselves as WASM exports.
use parlor_app as _;

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_islands();
}
