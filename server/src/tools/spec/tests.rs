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
