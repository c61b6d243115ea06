//! The model a server serves, read from its model list (`GET …/models`): each API
//! spells the list its own way, so the names are looked for where each puts them.

use std::fmt;

/// Why a model list names no model.
#[derive(Debug)]
pub enum ModelListError {
    /// The body is not JSON.
    NotJson(serde_json::Error),
    /// The list names no model.
    Empty,
}

impl fmt::Display for ModelListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelListError::NotJson(_) => f.write_str("the model list is not JSON"),
            ModelListError::Empty => f.write_str("the model list is empty"),
        }
    }
}

impl std::error::Error for ModelListError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelListError::NotJson(e) => Some(e),
            ModelListError::Empty => None,
        }
    }
}

/// The first model a model list's `body` names: OpenAI's and Anthropic's
/// `data[0].id`, Ollama's `models[0].name`, TGI's `model_id`, KServe's `name`.
pub fn first_model(body: &[u8]) -> Result<String, ModelListError> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(ModelListError::NotJson)?;
    let names = [
        &v["data"][0]["id"],
        &v["models"][0]["name"],
        &v["model_id"],
        &v["name"],
    ];
    let name = names
        .into_iter()
        .find_map(|m| m.as_str())
        .map(str::to_string);
    name.ok_or(ModelListError::Empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_apis_list_names_its_first_model() {
        let first = |body: &str| first_model(body.as_bytes()).map_err(|e| e.to_string());
        let openai = r#"{"object":"list","data":[{"id":"a"},{"id":"b"}]}"#;
        assert_eq!(first(openai), Ok("a".into()));
        assert_eq!(
            first(r#"{"models":[{"name":"llama3"}]}"#),
            Ok("llama3".into())
        );
        assert_eq!(first(r#"{"model_id":"tgi-m"}"#), Ok("tgi-m".into()));
        assert_eq!(first(r#"{"name":"kserve-m"}"#), Ok("kserve-m".into()));
        assert_eq!(
            first(r#"{"data":[]}"#),
            Err("the model list is empty".into())
        );
        let e = first_model(b"<html>").unwrap_err();
        assert_eq!(e.to_string(), "the model list is not JSON");
        assert!(std::error::Error::source(&e).is_some());
    }
}
