//! Runs the fake model server: `fake-llm [--prefix-cache] [PORT]` (0 or absent: a free
//! port). Prints `listening on http://127.0.0.1:PORT/v1` once it accepts connections.
//! `--prefix-cache`: Chat Completions report the emulated prompt cache too.

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cache = args.iter().any(|a| a == "--prefix-cache");
    let port: u16 = match args.into_iter().find(|a| a != "--prefix-cache") {
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
    let recorder = match cache {
        true => fake_llm::Recorder::with_prefix_cache(),
        false => fake_llm::Recorder::default(),
    };
    axum::serve(listener, fake_llm::router(recorder)).await
}
