//! A tiny INI parser: sections, keys and values.

use std::collections::BTreeMap;
use std::fmt;

/// Errors carry the 1-based line number.
#[derive(Debug, PartialEq)]
pub enum ParseError {
    MissingBracket(usize),
    MissingEquals(usize),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::MissingBracket(line) => write!(f, "line {}: missing ']'", line),
            ParseError::MissingEquals(line) => write!(f, "line {}: expected key = value", line),
        }
    }
}

pub type Section = BTreeMap<String, String>;

#[derive(Debug, Default)]
pub struct Ini {
    pub sections: BTreeMap<String, Section>,
}

impl Ini {
    /// Parse the whole text; the unnamed leading section is "".
    pub fn parse(text: &str) -> Result<Ini, ParseError> {
        let mut ini = Ini::default();
        let mut current = String::new();
        for (number, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                let name = rest.strip_suffix(']').ok_or(ParseError::MissingBracket(number + 1))?;
                current = name.trim().to_string();
                continue;
            }
            let (key, value) = line.split_once('=').ok_or(ParseError::MissingEquals(number + 1))?;
            ini.sections
                .entry(current.clone())
                .or_default()
                .insert(key.trim().to_string(), value.trim().to_string());
        }
        Ok(ini)
    }

    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.sections.get(section)?.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sections() {
        let ini = Ini::parse("a = 1\n[server]\nport = 8080 ; {not a brace}\n").unwrap();
        assert_eq!(ini.get("", "a"), Some("1"));
        assert_eq!(ini.get("server", "port"), Some("8080 ; {not a brace}"));
    }

    #[test]
    fn reports_line_numbers() {
        assert_eq!(Ini::parse("[x\n").unwrap_err(), ParseError::MissingBracket(1));
    }
}
