use super::*;
use parlor_domain::Message;

#[test]
fn openai_models_are_counted_with_their_tokenizer_others_estimated() {
    let exact = token_counter("gpt-4o-mini");
    assert!(exact.is_exact());
    // "hello world" is two tokens in o200k_base.
    assert_eq!(
        exact.count(&Message::user("hello world", 0)),
        2 + PER_MESSAGE
    );
    assert_eq!(
        exact.count(&Message::user("hello world", 1)),
        2 + PER_MESSAGE,
        "cached"
    );
    assert!(token_counter("gpt-4").is_exact());
    let estimate = token_counter("llama-3-70b");
    assert!(!estimate.is_exact());
    assert_eq!(estimate.count(&Message::user("x".repeat(40), 0)), 14);
}

/// A model entry with only these fields set.
fn entry(name: &str, provider: Option<&str>, max_context: Option<i64>) -> ModelEntry {
    ModelEntry {
        name: name.into(),
        provider: provider.map(str::to_owned),
        model: None,
        max_context,
        token_budget: None,
        vision: None,
        context_tokens: None,
        price_in: None,
        price_out: None,
        price_cached_in: None,
        price_cache_write: None,
        window_step: None,
        budget_step: None,
        tool_choice: None,
        last_call: None,
    }
}

#[test]
fn model_entries_are_read_with_their_defaults() {
    let path = Path::new("parlor.toml");
    let ok = specs(&[entry("small", None, Some(10))], path, &["team"]).unwrap();
    assert_eq!(ok[0].upstream, "small");
    assert_eq!(ok[0].limits.max_context, Some(10));
    assert_eq!((ok[0].window, ok[0].prices), (None, None));
    let priced = ModelEntry {
        model: Some("gpt-4o-mini".into()),
        price_in: Some(0.15),
        price_out: Some(0.6),
        ..entry("quick", None, None)
    };
    let declared = ModelEntry {
        context_tokens: Some(4096),
        ..entry("local", None, None)
    };
    let ok = specs(&[priced, declared], path, &["team"]).unwrap();
    assert_eq!(
        ok[0].window,
        Some(128_000),
        "known for the upstream id's family"
    );
    assert_eq!(ok[0].prices.map(|p| (p.input, p.output)), Some((0.15, 0.6)));
    assert_eq!(ok[1].window, Some(4096), "declared");
    let chooses = |choice: &str| ModelEntry {
        tool_choice: Some(choice.into()),
        ..entry("a", None, None)
    };
    let forced = specs(&[chooses("clock__now")], path, &["team"]).unwrap();
    assert_eq!(forced[0].tool_choice, ToolChoice::Tool("clock__now".into()));
}

#[test]
fn model_entries_are_validated_naming_the_field() {
    let path = Path::new("parlor.toml");
    let half_priced = ModelEntry {
        price_in: Some(1.0),
        ..entry("a", None, None)
    };
    let negative = ModelEntry {
        price_in: Some(-1.0),
        price_out: Some(1.0),
        ..entry("a", None, None)
    };
    let no_window = ModelEntry {
        context_tokens: Some(0),
        ..entry("a", None, None)
    };
    let chooses = |choice: &str| ModelEntry {
        tool_choice: Some(choice.into()),
        ..entry("a", None, None)
    };
    let last = ModelEntry {
        last_call: Some("never".into()),
        ..entry("a", None, None)
    };
    for (entry, expected) in [
        (half_priced, "price_out: is needed with price_in"),
        (negative, "price_in: must be a price"),
        (no_window, "context_tokens: must be at least 1"),
        (
            chooses("any tool"),
            "tool_choice: must be \"auto\", \"required\" or a tool",
        ),
        (last, "last_call: must be \"none\" or \"without_tools\""),
    ] {
        let error = specs(&[entry], path, &["team"]).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
    for (entries, expected) in [
        (
            vec![entry("a", Some("claude"), None)],
            "models[0] (name \"a\"): provider: unknown provider",
        ),
        (
            vec![entry("a", None, Some(0))],
            "max_context: must be at least 1 (got 0)",
        ),
        (
            vec![entry("a", None, None), entry("a", None, None)],
            "models[1] (name \"a\"): name: duplicate",
        ),
        (
            vec![entry("two words", None, None)],
            "name: must be a non-empty word",
        ),
    ] {
        let error = specs(&entries, path, &["team"]).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn a_model_may_name_a_declared_provider() {
    let path = Path::new("parlor.toml");
    let ok = specs(&[entry("t", Some("team"), None)], path, &["team"]).unwrap();
    assert_eq!(ok[0].provider, Provider::Named("team".into()));
    let error = specs(&[entry("t", Some("claude"), None)], path, &["team"])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("(declared: openai, mirror, team)"),
        "{error}"
    );
}

#[test]
fn cache_prices_come_with_the_others_and_are_checked() {
    let path = Path::new("parlor.toml");
    let cache_alone = ModelEntry {
        price_cached_in: Some(0.3),
        ..entry("a", None, None)
    };
    let cache_negative = ModelEntry {
        price_in: Some(3.0),
        price_out: Some(15.0),
        price_cache_write: Some(-3.75),
        ..entry("a", None, None)
    };
    for (entry, expected) in [
        (
            cache_alone,
            "price_cached_in: is needed with price_in and price_out",
        ),
        (cache_negative, "price_cache_write: must be a price"),
    ] {
        let error = specs(&[entry], path, &["team"]).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
    let priced = ModelEntry {
        price_in: Some(3.0),
        price_out: Some(15.0),
        price_cached_in: Some(0.3),
        ..entry("sonnet", None, None)
    };
    let prices = specs(&[priced], path, &[]).unwrap()[0].prices.unwrap();
    assert_eq!((prices.cached_input, prices.cache_write), (Some(0.3), None));
}

/// An agent from a template naming `node` with `model`.
fn agent(node: &str, model: &str) -> Agent {
    let json = format!(
        r#"{{"agentId": "a", "name": "A", "personality": "p", "nodes": ["{node}"],
            "nodeConfigurations": {{"{node}": {{"model": "{model}"}}}}}}"#
    );
    Agent::from_json(&json).unwrap().0
}

#[test]
fn without_openai_base_url_a_model_on_a_provider_still_answers() {
    let claude = crate::llm::AnthropicClient::new(
        "http://127.0.0.1:9/v1".into(),
        None,
        Duration::from_secs(1),
    );
    let providers = HashMap::from([("claude".to_owned(), LlmClient::Anthropic(claude))]);
    let declared = specs(
        &[entry("sonnet", Some("claude"), None)],
        Path::new("parlor.toml"),
        &["claude"],
    )
    .unwrap();
    let offline = LlmClient::Mirror(MirrorModel {
        delay: Duration::ZERO,
    });
    let models = |model_override: Option<&str>| {
        Models::new(
            declared.clone(),
            (offline.clone(), providers.clone()),
            model_override.map(str::to_owned),
            Duration::ZERO,
        )
        .with_anthropic_default(Some("claude".into()))
    };
    // PARLOR_MODEL naming a model on a provider is used; one nobody can reach is not.
    let general = agent("llm.openai", "gpt-4o-mini");
    assert_eq!(
        models(Some("sonnet")).agent_default(&general).as_deref(),
        Some("sonnet")
    );
    assert_eq!(
        models(None).agent_default(&general).as_deref(),
        Some(MIRROR_MODEL)
    );
    // An llm.anthropic agent's own model goes to the first anthropic provider.
    let claude_agent = agent("llm.anthropic", "claude-haiku-4-5");
    let spec = models(None).for_conversation(&claude_agent, None).unwrap();
    assert_eq!(spec.upstream, "claude-haiku-4-5");
    assert_eq!(spec.provider, Provider::Named("claude".into()));
    assert_eq!(models(None).label(&claude_agent, None).1, "claude");
}
