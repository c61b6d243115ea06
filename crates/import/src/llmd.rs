//! Cadence runs written in the llm-d benchmark report format. Filled in below.
