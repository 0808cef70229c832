#![forbid(unsafe_code)]

// === SIP message layer (pure code, no I/O): framing, message view, splicing ===
pub mod edit;
pub mod frame;
pub mod message;

pub use edit::{EditError, Splice};
pub use frame::{Frame, FrameError};
pub use message::{
    ContactView, HeaderField, HeaderName, Method, NameAddr, ParseError, SipMessage, StartLine, Via,
};
// === end SIP message layer ===
