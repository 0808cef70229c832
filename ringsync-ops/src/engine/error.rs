//! What can go wrong between a driver and its engine, said so that status
//! tells which side failed (R-EX-1).

/// An engine that could not be read or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No connection, or the connection broke.
    #[error("unreachable at {at}: {reason}")]
    Unreachable {
        /// The engine's address.
        at: String,
        /// What the socket said.
        reason: String,
    },
    /// No complete answer within the bound.
    #[error("no answer from {at} within {ms} ms")]
    Timeout {
        /// The engine's address.
        at: String,
        /// The bound.
        ms: u64,
    },
    /// An answer that is not what the engine's API gives.
    #[error("garbage from {at}: {reason}")]
    Garbage {
        /// The engine's address.
        at: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The engine answered and refused.
    #[error("refused by {at}: {reason}")]
    Refused {
        /// The engine's address.
        at: String,
        /// The engine's own words.
        reason: String,
    },
}

impl EngineError {
    /// Whether the engine gave no answer in its API's terms: nothing
    /// reached it, nothing came back in time, or what came back was not
    /// its API. Such an engine is not `reachable` (R-EX-1); one that
    /// answered and refused is.
    pub fn unanswered(&self) -> bool {
        !matches!(self, EngineError::Refused { .. })
    }

    /// A short word for metrics and the status table.
    pub fn kind(&self) -> &'static str {
        match self {
            EngineError::Unreachable { .. } => "unreachable",
            EngineError::Timeout { .. } => "timeout",
            EngineError::Garbage { .. } => "garbage",
            EngineError::Refused { .. } => "refused",
        }
    }
}

/// An error in words down to its cause: its own text, then each
/// `source()` under it that says something new. A client's error alone
/// says `client error (Connect)`; the io::Error at the bottom of its chain
/// says why (`Connection refused`).
pub(crate) fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

/// Runs `f` under `bound`: a slow engine costs at most that.
pub(crate) async fn bounded<T>(
    at: &str,
    bound: std::time::Duration,
    f: impl std::future::Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    match tokio::time::timeout(bound, f).await {
        Ok(r) => r,
        Err(_) => Err(EngineError::Timeout {
            at: at.to_owned(),
            ms: u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}
