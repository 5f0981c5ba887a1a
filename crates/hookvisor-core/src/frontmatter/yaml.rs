//! Reading a front matter body as YAML: a mapping of scalars or lists of scalars, with no
//! repeated key, merge key, anchor, alias or unknown tag (rules 3 and 4).

use std::collections::BTreeMap;

use super::{Fields, FrontMatterError, MERGE_KEY, repeated};

/// A YAML value as far as front matter needs it.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum YamlValue {
    Scalar(YamlScalar),
    List(Vec<YamlScalar>),
    /// A value of [`JSON_FIELDS`] (spawn's `inputs`, a webhook's `headers` and `body`), read
    /// by `with_mapping` (untagged scalars cannot take a mapping) and kept as its JSON text.
    #[serde(skip)]
    Json(serde_json::Value),
}

/// The fields whose value may be a mapping, kept as JSON text: spawn's `inputs` and a
/// webhook's `headers`, and a webhook's `body`, which is JSON text whatever its YAML type (so
/// `body: "42"` stays a string).
const JSON_FIELDS: [&str; 3] = ["inputs", "headers", "body"];

/// The one field whose every value is kept as JSON text, a scalar included.
const JSON_TEXT_FIELD: &str = "body";

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum YamlScalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
}

impl YamlScalar {
    fn into_string(self) -> String {
        match self {
            YamlScalar::Bool(b) => b.to_string(),
            YamlScalar::Int(i) => i.to_string(),
            YamlScalar::Float(x) => x.to_string(),
            YamlScalar::String(s) => s,
        }
    }
}

/// The fields YAML read, with the keys whose value was a list and those whose value was null.
#[derive(Default)]
pub(super) struct YamlFields {
    pub(super) fields: Fields,
    lists: Vec<String>,
    nulls: Vec<String>,
    /// The items of each list, apart.
    pub(super) items: BTreeMap<String, Vec<String>>,
}

impl YamlFields {
    /// YAML's value of `key`: `None` when it has none (null, or not given).
    pub(super) fn value(&self, key: &str) -> Option<&str> {
        if self.nulls.iter().any(|k| k == key) {
            return None;
        }
        self.fields.get(key).map(String::as_str)
    }

    pub(super) fn is_list(&self, key: &str) -> bool {
        self.lists.iter().any(|k| k == key)
    }
}

/// The YAML hookvisor reads from files the agent can write (front matter, `hookvisor.yml`): no
/// anchors or aliases (no billion laughs), repeated and merge keys refused, unknown tags refused.
pub(crate) fn strict_options() -> serde_saphyr::Options {
    use serde_saphyr::{DuplicateKeyPolicy, MergeKeyPolicy};
    serde_saphyr::options! {
        budget: serde_saphyr::budget! { max_anchors: 0, max_aliases: 0 },
        duplicate_keys: DuplicateKeyPolicy::Error,
        merge_keys: MergeKeyPolicy::Error,
        reject_unsupported_tags: true,
        with_snippet: false,
    }
}

/// The body read again as JSON values, when its only mapping values are of [`JSON_FIELDS`]
/// (and `body` may be anything): untagged values cannot take a block mapping whatever their
/// variants. `None` for anything else, which stays not YAML as before.
fn with_mapping(text: &str) -> Option<BTreeMap<String, Option<YamlValue>>> {
    use serde_json::Value as Json;
    let scalar = |value: Json| match value {
        Json::Bool(b) => Some(YamlScalar::Bool(b)),
        Json::Number(n) => Some(match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => YamlScalar::Int(i),
            (None, Some(x)) => YamlScalar::Float(x),
            (None, None) => YamlScalar::String(n.to_string()),
        }),
        Json::String(s) => Some(YamlScalar::String(s)),
        Json::Null | Json::Array(_) | Json::Object(_) => None,
    };
    let map: BTreeMap<String, Option<Json>> =
        serde_saphyr::from_str_with_options(text, strict_options()).ok()?;
    map.into_iter()
        .map(|(key, value)| {
            let value = match value {
                None | Some(Json::Null) => None,
                Some(json) if key == JSON_TEXT_FIELD => Some(YamlValue::Json(json)),
                Some(json @ Json::Object(_)) if JSON_FIELDS.contains(&key.as_str()) => {
                    Some(YamlValue::Json(json))
                }
                Some(Json::Object(_)) => return None,
                Some(Json::Array(items)) => Some(YamlValue::List(
                    items.into_iter().map(scalar).collect::<Option<_>>()?,
                )),
                Some(other) => Some(YamlValue::Scalar(scalar(other)?)),
            };
            Some((key, value))
        })
        .collect()
}

/// Reads the body as a YAML mapping of scalars (or lists of scalars); `None` when it is not
/// one. Repeated keys and merge keys are errors (rules 3, 4).
pub(super) fn parse_yaml(
    body: &[String],
    first_line: usize,
) -> Result<Option<YamlFields>, FrontMatterError> {
    use serde_saphyr::Error;
    if body.iter().all(|line| line.is_empty()) {
        return Ok(Some(YamlFields::default()));
    }
    let options = strict_options();
    let line_of = |yaml_line: u64| first_line + usize::try_from(yaml_line).unwrap_or(1).max(1) - 1;
    let text = body.join("\n");
    let map: BTreeMap<String, Option<YamlValue>> =
        match serde_saphyr::from_str_with_options(&text, options) {
            Ok(map) => map,
            Err(Error::DuplicateMappingKey { key, location }) => {
                return Err(FrontMatterError::Syntax {
                    line: line_of(location.line()),
                    message: repeated(key.as_deref().unwrap_or("a key")),
                });
            }
            Err(Error::MergeKeyNotAllowed { location }) => {
                return Err(FrontMatterError::Syntax {
                    line: line_of(location.line()),
                    message: MERGE_KEY.to_owned(),
                });
            }
            // A mapping (of `JSON_FIELDS`), which the scalar reading refuses; else not YAML
            // (`pattern: *.go`): the flat reader's turn.
            Err(_) => match with_mapping(&text) {
                Some(map) => map,
                None => return Ok(None),
            },
        };
    // A scalar or list `body` is read again for its JSON type, which the scalar reading turns
    // into text.
    let map = match map.get(JSON_TEXT_FIELD) {
        Some(Some(YamlValue::Scalar(_) | YamlValue::List(_))) => match with_mapping(&text) {
            Some(map) => map,
            None => return Ok(None),
        },
        _ => map,
    };
    let mut lists = Vec::new();
    let mut nulls = Vec::new();
    let mut list_items = BTreeMap::new();
    let fields = map
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                None => {
                    nulls.push(key.clone());
                    String::new()
                }
                Some(YamlValue::Scalar(s)) => s.into_string(),
                Some(YamlValue::Json(json)) => json.to_string(),
                Some(YamlValue::List(items)) => {
                    lists.push(key.clone());
                    let items: Vec<String> =
                        items.into_iter().map(YamlScalar::into_string).collect();
                    let joined = items.join(",");
                    list_items.insert(key.clone(), items);
                    joined
                }
            };
            (key, value)
        })
        .collect();
    Ok(Some(YamlFields {
        fields,
        lists,
        nulls,
        items: list_items,
    }))
}

#[cfg(test)]
mod tests {
    use crate::frontmatter::tests::fields;
    use crate::frontmatter::{Fields, parse};

    #[test]
    fn inputs_is_the_one_mapping() {
        let text = "---\nevent: x\ninputs:\n  task: \"${task_id}\"\n  n: 3\n  l: [1, true]\nargv: [a, b]\n---\n";
        let fields = parse(text).unwrap();
        // Compared as JSON: key order depends on serde_json's `preserve_order`, which the
        // workspace turns on for the CLI (a test of this crate alone runs without it).
        let inputs: serde_json::Value = serde_json::from_str(&fields["inputs"]).unwrap();
        assert_eq!(
            inputs,
            serde_json::json!({"l": [1, true], "n": 3, "task": "${task_id}"})
        );
        assert_eq!(fields["argv"], "a,b");
        // Any other mapping leaves the body to the flat reader, as before.
        let other = parse("---\nevent: x\nother:\n  a: 1\n---\n");
        assert_ne!(
            other.ok().and_then(|f| f.get("other").cloned()).as_deref(),
            Some(r#"{"a":1}"#)
        );
    }

    #[test]
    fn webhook_headers_and_body_are_json_text() {
        let text = "---\nevent: x\nheaders:\n  A: \"${t}\"\n  N: 3\nbody:\n  s: \"42\"\n  n: 42\n  \
                    l: [{k: \"${v}\"}]\n---\n";
        let fields = parse(text).unwrap();
        let headers: serde_json::Value = serde_json::from_str(&fields["headers"]).unwrap();
        assert_eq!(headers, serde_json::json!({"A": "${t}", "N": 3}));
        let body: serde_json::Value = serde_json::from_str(&fields["body"]).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"s": "42", "n": 42, "l": [{"k": "${v}"}]})
        );
        // A scalar body keeps its YAML type as JSON text.
        for (yaml, json) in [
            ("\"42\"", "\"42\""),
            ("42", "42"),
            ("hi", "\"hi\""),
            ("[1, a]", "[1,\"a\"]"),
        ] {
            let fields = parse(&format!("---\nevent: x\nbody: {yaml}\n---\n")).unwrap();
            assert_eq!(fields["body"], json, "{yaml}");
        }
    }

    #[test]
    fn yaml_features() {
        let text = "---\ntype: file\npattern:\n  - '*.go'\n  - 'go.mod'\ntimeout: 30\n\
                    notify_llm: false\ndescription: |\n  two\n  lines\n---\n";
        assert_eq!(
            parse(text),
            Ok(fields(&[
                ("description", "two\nlines\n"),
                ("notify_llm", "false"),
                ("pattern", "*.go,go.mod"),
                ("timeout", "30"),
                ("type", "file"),
            ]))
        );
        assert_eq!(parse("---\n---\n"), Ok(Fields::new()));
        assert_eq!(
            parse("---\ntype:\nname:\n---\n"),
            Ok(fields(&[("name", ""), ("type", "")])),
            "a key without a value is kept, empty: discovery says whether that is a problem"
        );
    }
}
