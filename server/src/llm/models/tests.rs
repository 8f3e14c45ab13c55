use super::*;

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
