use super::*;

fn read(toml: &str) -> Result<ToolSpecs, String> {
    let path = Path::new("parlor.toml");
    let file = ConfigFile::parse(toml, path).map_err(|e| e.to_string())?;
    let var = |name: &str| match name {
        "TOKEN" => Some("s3cret".to_owned()),
        "PATH" => Some("/usr/bin".to_owned()),
        _ => None,
    };
    specs(&file, path, &var).map_err(|e| e.to_string())
}

#[test]
fn the_documented_example_is_read_with_its_defaults() {
    let specs = read(
        r#"
[tools]
max_rounds = 4

[[mcp_servers]]
id = "clock"
command = "python3"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
env = { TZ = "UTC" }
confirm = "first"
allow = ["get_current_time"]
save = 2

[[mcp_servers]]
id = "everything"
url = "http://127.0.0.1:3001/mcp"
headers = { Authorization = "Bearer ${TOKEN}" }

[[mcp_servers]]
id = "recall"
builtin = "parlor"
"#,
    )
    .unwrap();
    assert_eq!((specs.limits.max_rounds, specs.limits.max_calls), (4, 32));
    let clock = &specs.servers[0];
    let Transport::Stdio { command, args, env } = &clock.transport else {
        panic!("stdio")
    };
    assert_eq!((command.as_str(), args.len()), ("python3", 4));
    // Only what the entry names, plus PATH (HOME is not set here).
    assert_eq!(env.keys().collect::<Vec<_>>(), ["PATH", "TZ"]);
    assert_eq!(clock.confirm, Confirm::First);
    assert_eq!(clock.timeout, Duration::from_secs(30));
    assert_eq!(clock.max_result_bytes, 65536);
    assert_eq!(clock.save, Save::Turns(2.try_into().unwrap()));
    let Transport::Http { headers, .. } = &specs.servers[1].transport else {
        panic!("http")
    };
    assert_eq!(headers["Authorization"], "Bearer s3cret");
    assert_eq!(specs.servers[1].save, Save::Always, "kept by default");
    assert_eq!(specs.servers[2].transport, Transport::Builtin);
}

#[test]
fn every_refusal_names_the_entry_and_the_field() {
    let cases = [
        ("[tools]\nmax_rounds = 0", "[tools]: max_rounds"),
        ("[tools]\nmax_calls = 501", "[tools]: max_calls"),
        ("[[mcp_servers]]\nid = \"Clock\"\ncommand = \"x\"", "mcp_servers[0] (id \"Clock\"): id"),
        ("[[mcp_servers]]\nid = \"a\"", "mcp_servers[0] (id \"a\"): command: set one of"),
        (
            "[[mcp_servers]]\nid = \"a\"\ncommand = \"x\"\nurl = \"http://h/mcp\"",
            "mcp_servers[0] (id \"a\"): url: set only one",
        ),
        (
            "[[mcp_servers]]\nid = \"a\"\nurl = \"ftp://h/mcp\"",
            "mcp_servers[0] (id \"a\"): url: must be http or https",
        ),
        (
            "[[mcp_servers]]\nid = \"a\"\nurl = \"http://h\"\nheaders = { X = \"${NOPE}\" }",
            "headers: X: ${NOPE} is not set",
        ),
        (
            "[[mcp_servers]]\nid = \"a\"\ncommand = \"x\"\ntimeout_secs = 0",
            "timeout_secs: must be between 1 and 600 (got 0)",
        ),
        (
            "[[mcp_servers]]\nid = \"a\"\ncommand = \"x\"\nconfirm = \"maybe\"",
            "confirm: must be",
        ),
        (
            "[[mcp_servers]]\nid = \"a\"\nbuiltin = \"other\"",
            "builtin: unknown built-in \"other\"",
        ),
        (
            "[[mcp_servers]]\nid = \"a\"\ncommand = \"x\"\n[[mcp_servers]]\nid = \"a\"\ncommand = \"y\"",
            "mcp_servers[1] (id \"a\"): id: duplicate id",
        ),
        ("[[mcp_servers]]\nid = \"a\"\ncommand = \"  \"", "command: must name a program"),
        ("[[mcp_servers]]\nid = \"a\"\ncommand = \"x\"\nsave = -1", "save"),
        ("[[mcp_servers]]\nid = \"a\"\ncommand = \"x\"\nport = 1", "unknown field `port`"),
    ];
    for (toml, expected) in cases {
        let error = read(toml).unwrap_err();
        assert!(error.contains(expected), "{toml}\n→ {error}");
    }
}

#[test]
fn variables_expand_inside_text_and_an_unclosed_one_is_refused() {
    let var = |name: &str| (name == "A").then(|| "1".to_owned());
    assert_eq!(expand("x${A}y${A}", &var).unwrap(), "x1y1");
    assert_eq!(expand("plain", &var).unwrap(), "plain");
    assert!(expand("${A", &var).unwrap_err().contains("unclosed"));
}

#[test]
fn an_agent_names_declared_servers_and_allowed_tools_only() {
    let specs = read(
        "[[mcp_servers]]\nid = \"clock\"\ncommand = \"x\"\nallow = [\"now\"]\n[[mcp_servers]]\nid = \"all\"\ncommand = \"y\"",
    )
    .unwrap();
    let agent = |tools: &[&str]| {
        let json = serde_json::json!({
            "agentId": "a", "name": "A",
            "chatSettings": {"tools": tools},
        });
        parlor_domain::Agent::from_json(&json.to_string())
            .unwrap()
            .0
    };
    assert!(specs
        .check_agents([&agent(&["clock", "clock.now", "all.anything"])])
        .is_ok());
    for (tools, why) in [
        (["nope"], "names no declared tool server"),
        (["clock.later"], "is not in the allow list of \"clock\""),
        (["clock."], "names no tool after the dot"),
    ] {
        let error = specs
            .check_agents([&agent(&tools)])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(why) && error.contains("agent \"a\""),
            "{error}"
        );
    }
}

#[test]
fn per_user_servers_are_checked_field_by_field() {
    let specs = read(
        r#"
[[mcp_servers]]
id = "memory"
command = "mcp-server-memory"
scope = "per_user"
idle_minutes = 5
user_secrets = ["GITHUB_TOKEN"]
env = { MEMORY_FILE_PATH = "{user_dir}/memory.jsonl" }

[[mcp_servers]]
id = "api"
url = "http://h/mcp"
scope = "per_user"
user_secrets = ["API_KEY"]
user_headers = { Authorization = "Bearer {API_KEY}" }
"#,
    )
    .unwrap();
    let Scope::PerUser(memory) = &specs.servers[0].scope else {
        panic!("{:?}", specs.servers[0].scope)
    };
    assert_eq!(memory.idle, Duration::from_secs(300));
    assert_eq!((memory.max_users, memory.secrets.len()), (32, 1));
    let Scope::PerUser(api) = &specs.servers[1].scope else {
        panic!()
    };
    assert_eq!(api.idle, Duration::from_secs(900), "15 minutes by default");
    for (toml, expected) in per_user_refusals() {
        let error = read(&toml).unwrap_err();
        assert!(error.contains(expected), "{toml}\n→ {error}");
    }
}

/// Per-user entries Parlor refuses, and what the refusal says.
fn per_user_refusals() -> Vec<(String, &'static str)> {
    let server = |fields: &str| format!("[[mcp_servers]]\nid = \"a\"\n{fields}");
    vec![
        (server("command = \"x\"\nscope = \"team\""), "scope: must be"),
        (server("command = \"x\"\nuser_secrets = [\"T\"]"), "user_secrets: applies to scope = \"per_user\""),
        (
            server("command = \"x\"\nenv = { F = \"{user_dir}/f\" }"),
            "env: applies to scope = \"per_user\"",
        ),
        (server("builtin = \"parlor\"\nscope = \"per_user\""), "scope: the built-in"),
        (
            server("command = \"x\"\nscope = \"per_user\"\nidle_minutes = 0"),
            "idle_minutes: must be between 1 and 1440",
        ),
        (
            server("command = \"x\"\nscope = \"per_user\"\nmax_users = 0"),
            "max_users: must be between 1 and 1000",
        ),
        (
            server("command = \"x\"\nscope = \"per_user\"\nuser_secrets = [\"lower\"]"),
            "user_secrets: \"lower\" must be",
        ),
        (
            server("command = \"x\"\nscope = \"per_user\"\nuser_secrets = [\"A\", \"A\"]"),
            "named twice",
        ),
        (
            server("command = \"x\"\nscope = \"per_user\"\nuser_secrets = [\"LD_PRELOAD\"]"),
            "makes programs load code",
        ),
        (
            server("command = \"x\"\nscope = \"per_user\"\nuser_secrets = [\"T\"]\nenv = { T = \"1\" }"),
            "also set by the operator",
        ),
        (
            server("command = \"x\"\nscope = \"per_user\"\nuser_secrets = [\"T\"]\nuser_headers = { A = \"{T}\" }"),
            "user_headers: applies to url servers only",
        ),
        (
            server("url = \"http://h\"\nscope = \"per_user\"\nuser_secrets = [\"T\"]\nuser_headers = { A = \"{U}\" }"),
            "{U} is not one of user_secrets",
        ),
        (
            server("url = \"http://h\"\nscope = \"per_user\"\nuser_secrets = [\"T\", \"U\"]\nuser_headers = { A = \"{T}\" }"),
            "user_secrets: U is not used in user_headers",
        ),
        (
            server("url = \"http://h\"\nheaders = { A = \"1\" }\nscope = \"per_user\"\nuser_secrets = [\"T\"]\nuser_headers = { a = \"{T}\" }"),
            "\"a\" is also in headers",
        ),
        (
            server("url = \"http://h\"\nscope = \"per_user\"\nuser_headers = { A = \"fixed\" }"),
            "names no secret",
        ),
        (
            server("url = \"http://h\"\nscope = \"per_user\"\nuser_secrets = [\"T\"]\nuser_headers = { A = \"{T\" }"),
            "an unclosed {",
        ),
    ]
}

#[test]
fn a_users_transport_gets_their_values_and_folder_and_nothing_is_read_twice() {
    let per_user = PerUser {
        idle: Duration::from_secs(60),
        max_users: 1,
        secrets: vec!["T".into(), "U".into()],
        headers: [("A".to_owned(), "Bearer {T} {U}".to_owned())].into(),
    };
    let values = BTreeMap::from([
        ("T".to_owned(), "{U}".to_owned()),
        ("U".to_owned(), "u".to_owned()),
    ]);
    let http = Transport::Http {
        url: "http://h".into(),
        headers: BTreeMap::new(),
    };
    let Ok(Transport::Http { headers, .. }) = for_user(&http, &per_user, Path::new("/d"), &values)
    else {
        panic!()
    };
    assert_eq!(headers["A"], "Bearer {U} u", "a value is not a template");
    let bad = BTreeMap::from([("T".to_owned(), "\u{7f}".to_owned())]);
    assert!(for_user(&http, &per_user, Path::new("/d"), &bad).is_err());
    let stdio = Transport::Stdio {
        command: "x".into(),
        args: vec!["--dir={user_dir}".into()],
        env: BTreeMap::from([("F".to_owned(), "{user_dir}/f".to_owned())]),
    };
    let Ok(Transport::Stdio { args, env, .. }) =
        for_user(&stdio, &per_user, Path::new("/d"), &values)
    else {
        panic!()
    };
    assert_eq!(
        (args.as_slice(), env["HOME"].as_str()),
        (["--dir=/d/files".to_owned()].as_slice(), "/d/home"),
        "what tools write is never the home programs load from"
    );
    assert_eq!(env["PYTHONNOUSERSITE"], "1");
    assert_eq!(
        (env["F"].as_str(), env["T"].as_str(), env["U"].as_str()),
        ("/d/files/f", "{U}", "u")
    );
}
