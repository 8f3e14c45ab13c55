//! A tool server's list, checked before any of it reaches a model: every provider refuses a
//! whole request for one tool it cannot read (a schema that is not an object, an array
//! without `items`), so a tool Parlor cannot vouch for is dropped with a warning instead of
//! breaking every turn of its agents. Names that would clash are refused outright (spec
//! `tools.md`: a clash names both tools).
//!
//! The rules are those the providers apply, which the JSON Schema meta-schema does not: an
//! array schema without `items` is valid JSON Schema and still refused by OpenAI.

use super::NameClash;
use serde_json::{Map, Value};

/// The most tools one server may offer, and one agent may be given.
pub const MAX_TOOLS: usize = 128;
/// The longest description given to a model, in bytes (a longer one is cut, saying so).
pub const MAX_DESCRIPTION: usize = 1024;
/// The largest schema, as JSON, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// The deepest nesting of a schema.
pub const MAX_SCHEMA_DEPTH: usize = 16;

/// One tool as its server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Listed {
    pub name: String,
    pub description: String,
    pub schema: Value,
}

/// What was done with a tool that is not offered as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub tool: String,
    pub why: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.tool, self.why)
    }
}

/// A list as offered: the tools kept (descriptions cut where needed) and what was dropped or
/// changed, and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checked {
    pub tools: Vec<Listed>,
    pub warnings: Vec<Warning>,
}

/// Checks the list of server `server`: a name clash is an error naming both tools; a tool
/// whose schema a provider would refuse is dropped; descriptions are cut; past
/// [`MAX_TOOLS`] the rest are dropped.
pub fn check(server: &str, listed: Vec<Listed>) -> Result<Checked, NameClash> {
    let pairs: Vec<(&str, &str)> = listed.iter().map(|t| (server, t.name.as_str())).collect();
    super::model_names(&pairs)?;
    let mut out = Checked::default();
    let total = listed.len();
    for (at, mut tool) in listed.into_iter().enumerate() {
        if out.tools.len() == MAX_TOOLS {
            out.warnings.push(Warning {
                tool: format!("{} more", total - at),
                why: format!("dropped: a server may offer at most {MAX_TOOLS} tools"),
            });
            break;
        }
        if tool.name.trim().is_empty() {
            out.warnings.push(Warning {
                tool: "(unnamed)".into(),
                why: "dropped: a tool needs a name".into(),
            });
            continue;
        }
        if let Err(why) = schema(&tool.schema) {
            out.warnings.push(Warning {
                tool: tool.name,
                why: format!("dropped: its input schema {why}"),
            });
            continue;
        }
        if tool.description.len() > MAX_DESCRIPTION {
            let mut end = MAX_DESCRIPTION - 1;
            while !tool.description.is_char_boundary(end) {
                end -= 1;
            }
            let was = tool.description.len();
            tool.description.truncate(end);
            tool.description.push('…');
            out.warnings.push(Warning {
                tool: tool.name.clone(),
                why: format!("description cut to {MAX_DESCRIPTION} of {was} bytes"),
            });
        }
        out.tools.push(tool);
    }
    Ok(out)
}

/// Whether a tool's input schema is one every provider accepts: an object schema of at most
/// [`MAX_SCHEMA_BYTES`] and [`MAX_SCHEMA_DEPTH`] levels, each subschema well formed.
pub fn schema(schema: &Value) -> Result<(), String> {
    let Value::Object(top) = schema else {
        return Err("is not a JSON object".into());
    };
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |v| v.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(format!("is {size} bytes (at most {MAX_SCHEMA_BYTES})"));
    }
    match top.get("type") {
        None => {}
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => return Err(format!("has type {other} at the top (must be \"object\")")),
    }
    subschema(top, "", 0)
}

const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// Checks one subschema at `at` (a JSON pointer, for the message).
fn subschema(node: &Map<String, Value>, at: &str, depth: usize) -> Result<(), String> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!("nests deeper than {MAX_SCHEMA_DEPTH} levels"));
    }
    let place = || {
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        }
    };
    let types: Vec<&str> = match node.get("type") {
        None => Vec::new(),
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        Some(other) => return Err(format!("has type {other} at {}", place())),
    };
    if let Some(bad) = types.iter().find(|t| !TYPES.contains(t)) {
        return Err(format!("has unknown type {bad:?} at {}", place()));
    }
    if types.contains(&"array") && !node.contains_key("items") && !node.contains_key("prefixItems")
    {
        return Err(format!("has an array without items at {}", place()));
    }
    children(node, at, depth)?;
    if let Some(required) = node.get("required") {
        let strings = required
            .as_array()
            .is_some_and(|r| r.iter().all(Value::is_string));
        if !strings {
            return Err(format!(
                "has required that is not a list of names at {}",
                place()
            ));
        }
    }
    if let Some(values) = node.get("enum") {
        if values.as_array().is_none_or(|v| v.is_empty()) {
            return Err(format!("has an enum that is not a list at {}", place()));
        }
    }
    Ok(())
}

/// Checks the subschemas of `node` (properties, items, combinators, definitions).
fn children(node: &Map<String, Value>, at: &str, depth: usize) -> Result<(), String> {
    let place = || {
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        }
    };
    let child = |value: &Value, key: &str| -> Result<(), String> {
        let at = format!("{at}/{key}");
        match value {
            Value::Object(map) => subschema(map, &at, depth + 1),
            Value::Bool(_) => Ok(()),
            other => Err(format!("has {other} where a schema belongs at {at}")),
        }
    };
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        match node.get(key) {
            None => {}
            Some(Value::Object(map)) => {
                for (name, value) in map {
                    child(value, &format!("{key}/{name}"))?;
                }
            }
            Some(_) => return Err(format!("has {key} that is not an object at {}", place())),
        }
    }
    for key in ["items", "additionalProperties", "not", "contains"] {
        match node.get(key) {
            None => {}
            Some(Value::Array(items)) if key == "items" => {
                for (i, item) in items.iter().enumerate() {
                    child(item, &format!("items/{i}"))?;
                }
            }
            Some(value) => child(value, key)?,
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        match node.get(key) {
            None => {}
            Some(Value::Array(items)) if !items.is_empty() => {
                for (i, item) in items.iter().enumerate() {
                    child(item, &format!("{key}/{i}"))?;
                }
            }
            Some(_) => return Err(format!("has {key} that is not a list at {}", place())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value) -> Listed {
        Listed {
            name: name.into(),
            description: format!("{name} does things"),
            schema,
        }
    }

    #[test]
    fn schemas_a_provider_refuses_are_dropped_with_the_reason() {
        let good = json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "when": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        }, "required": ["tags"]});
        let list = vec![
            tool("ok", good),
            tool("empty", json!({})),
            tool(
                "array",
                json!({"type": "object", "properties": {"xs": {"type": "array"}}}),
            ),
            tool("top", json!({"type": "string"})),
            tool(
                "nested",
                json!({"type": "object", "properties": {"a": {"type": "object",
                "properties": {"b": {"type": ["array", "null"]}}}}}),
            ),
            tool("required", json!({"type": "object", "required": "a"})),
            tool(
                "kind",
                json!({"type": "object", "properties": {"a": {"type": "text"}}}),
            ),
            tool("scalar", json!({"type": "object", "properties": {"a": 3}})),
            tool("list", json!([])),
        ];
        let checked = check("s", list).unwrap();
        let kept: Vec<&str> = checked.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(kept, ["ok", "empty"]);
        let why = |tool: &str| {
            checked
                .warnings
                .iter()
                .find(|w| w.tool == tool)
                .map(|w| w.why.clone())
                .unwrap_or_default()
        };
        assert!(
            why("array").contains("array without items at /properties/xs"),
            "{}",
            why("array")
        );
        assert!(why("top").contains("must be \"object\""));
        assert!(
            why("nested").contains("/properties/a/properties/b"),
            "{}",
            why("nested")
        );
        assert!(why("required").contains("required"));
        assert!(why("kind").contains("unknown type \"text\""));
        assert!(why("scalar").contains("where a schema belongs"));
        assert!(why("list").contains("not a JSON object"));
    }

    #[test]
    fn long_lists_deep_or_large_schemas_and_long_descriptions_are_bounded() {
        let list: Vec<Listed> = (0..200)
            .map(|i| tool(&format!("t{i}"), json!({})))
            .collect();
        let checked = check("s", list).unwrap();
        assert_eq!(checked.tools.len(), MAX_TOOLS);
        assert_eq!(checked.warnings.len(), 1);
        assert_eq!(checked.warnings[0].tool, "72 more");

        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"a": deep}});
        }
        assert!(schema(&deep).unwrap_err().contains("deeper"));
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(schema(&big).unwrap_err().contains("bytes"));

        let mut long = tool("long", json!({}));
        long.description = "é".repeat(MAX_DESCRIPTION);
        let checked = check("s", vec![long]).unwrap();
        let description = &checked.tools[0].description;
        assert!(description.len() <= MAX_DESCRIPTION + '…'.len_utf8());
        assert!(description.ends_with('…'));
        assert!(checked.warnings[0].why.contains("cut to 1024"));
    }

    #[test]
    fn two_tools_one_name_is_an_error_naming_both() {
        let clash = check(
            "fs",
            vec![tool("read.file", json!({})), tool("read_file", json!({}))],
        )
        .unwrap_err();
        assert_eq!(clash.first, "fs.read.file");
        assert_eq!(clash.second, "fs.read_file");
        assert_eq!(clash.name, "fs__read_file");
    }
}
