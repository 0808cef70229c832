//! What can be wrong with a message, in words short enough for a 400.

use thiserror::Error;

/// What is wrong with a message. The `Display` text (also returned by
/// [`ParseError::reason`]) is short enough to be a 400 reason phrase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    /// Nothing but whitespace.
    #[error("Empty Message")]
    Empty,
    /// No empty line ends the header section.
    #[error("Missing Empty Line")]
    Unterminated,
    /// The Request-Line is malformed.
    #[error("Bad Request-Line")]
    BadRequestLine,
    /// The Status-Line is malformed (or the code is outside 100..=699).
    #[error("Bad Status-Line")]
    BadStatusLine,
    /// The SIP version is not 2.0; a request deserves a 505.
    #[error("Version Not Supported")]
    UnsupportedVersion,
    /// A header line has no colon or its name is not a token, or the
    /// header section holds a NUL byte.
    #[error("Malformed Header")]
    BadHeader,
    /// Content-Length is not a number, or several disagree.
    #[error("Bad Content-Length")]
    BadContentLength,
    /// The datagram holds fewer body bytes than Content-Length announces.
    #[error("Body Shorter Than Content-Length")]
    BodyTooShort,
    /// No Via header.
    #[error("Missing Via")]
    MissingVia,
    /// No From header.
    #[error("Missing From")]
    MissingFrom,
    /// No To header.
    #[error("Missing To")]
    MissingTo,
    /// No (or an empty) Call-ID header.
    #[error("Missing Call-ID")]
    MissingCallId,
    /// No CSeq header.
    #[error("Missing CSeq")]
    MissingCSeq,
    /// More than one From header.
    #[error("Duplicate From")]
    DuplicateFrom,
    /// More than one To header.
    #[error("Duplicate To")]
    DuplicateTo,
    /// More than one Call-ID header.
    #[error("Duplicate Call-ID")]
    DuplicateCallId,
    /// More than one CSeq header.
    #[error("Duplicate CSeq")]
    DuplicateCSeq,
    /// A Via value does not parse.
    #[error("Bad Via")]
    BadVia,
    /// The From value does not parse.
    #[error("Bad From")]
    BadFrom,
    /// The To value does not parse.
    #[error("Bad To")]
    BadTo,
    /// CSeq is not `number method`, or the number exceeds 2^32-1.
    #[error("Bad CSeq")]
    BadCSeq,
    /// The CSeq method differs from the request method.
    #[error("CSeq Method Mismatch")]
    CSeqMethodMismatch,
    /// Max-Forwards is not a number in 0..=255.
    #[error("Bad Max-Forwards")]
    BadMaxForwards,
    /// A Route value does not parse.
    #[error("Bad Route")]
    BadRoute,
    /// A Record-Route value does not parse.
    #[error("Bad Record-Route")]
    BadRecordRoute,
    /// A Contact value does not parse.
    #[error("Bad Contact")]
    BadContact,
}

impl ParseError {
    /// A static reason phrase for a 400 (or 505) response.
    pub fn reason(&self) -> &'static str {
        match self {
            ParseError::Empty => "Empty Message",
            ParseError::Unterminated => "Missing Empty Line",
            ParseError::BadRequestLine => "Bad Request-Line",
            ParseError::BadStatusLine => "Bad Status-Line",
            ParseError::UnsupportedVersion => "Version Not Supported",
            ParseError::BadHeader => "Malformed Header",
            ParseError::BadContentLength => "Bad Content-Length",
            ParseError::BodyTooShort => "Body Shorter Than Content-Length",
            ParseError::MissingVia => "Missing Via",
            ParseError::MissingFrom => "Missing From",
            ParseError::MissingTo => "Missing To",
            ParseError::MissingCallId => "Missing Call-ID",
            ParseError::MissingCSeq => "Missing CSeq",
            ParseError::DuplicateFrom => "Duplicate From",
            ParseError::DuplicateTo => "Duplicate To",
            ParseError::DuplicateCallId => "Duplicate Call-ID",
            ParseError::DuplicateCSeq => "Duplicate CSeq",
            ParseError::BadVia => "Bad Via",
            ParseError::BadFrom => "Bad From",
            ParseError::BadTo => "Bad To",
            ParseError::BadCSeq => "Bad CSeq",
            ParseError::CSeqMethodMismatch => "CSeq Method Mismatch",
            ParseError::BadMaxForwards => "Bad Max-Forwards",
            ParseError::BadRoute => "Bad Route",
            ParseError::BadRecordRoute => "Bad Record-Route",
            ParseError::BadContact => "Bad Contact",
        }
    }
}
