//! `--output` (`-o`): what a command that lists or reports prints on stdout. A table for a
//! person, or one JSON document for a script: the API's answer as the API gave it, or the
//! structure the command computed, the same data the table shows. Progress and errors stay on
//! stderr either way, so stdout parses whole.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned text for a terminal.
    Table,
    /// One JSON document on stdout.
    Json,
}

impl Output {
    /// Prints `document` as JSON, or `table`'s text of it.
    pub fn print(self, document: &Value, table: impl FnOnce(&Value) -> String) {
        match self {
            Output::Json => println!(
                "{}",
                serde_json::to_string_pretty(document).expect("a JSON value serializes")
            ),
            Output::Table => print!("{}", table(document)),
        }
    }
}
