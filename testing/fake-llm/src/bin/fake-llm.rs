//! Runs the fake OpenAI-compatible server: `fake-llm [PORT]` (0 or absent: a free port).
//! Prints `listening on http://127.0.0.1:PORT/v1` once it accepts connections.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bad port {arg:?}"),
            )
        })?,
        None => 0,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}/v1", listener.local_addr()?);
    axum::serve(listener, fake_llm::router(Default::default())).await
}
