//! Traces (OpenTelemetry): the spans of a claim batch and of each attempt, and the W3C
//! `traceparent` each attempt sends its subscriber.
//!
//! An attempt happens long after its publish, maybe in another process, so it cannot inherit
//! the publish's span in memory: the publish stores its span's `traceparent` on the event
//! (`NewEvent::traceparent`), each claim reads it back with the event's body
//! (`EventBody::traceparent`), and the attempt's span is that span's child, in the publish's
//! trace. The subscriber gets the attempt span's own `traceparent`, so its spans hang under
//! the attempt that caused them.
//!
//! Tracing is off unless the binary hands a tracer over ([`Traces::to`]): then no span is
//! made, nothing is stored and no `traceparent` is sent, and [`Span`] is an empty shell that
//! costs an attempt one branch.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;
use std::time::SystemTime;

/// The W3C trace context header: `version-trace_id-parent_id-flags`.
pub const TRACEPARENT: &str = "traceparent";

/// Where spans go: an OpenTelemetry tracer, or nowhere (tracing off).
#[derive(Clone, Debug)]
pub struct Traces(Option<SdkTracer>);

impl Traces {
    /// Tracing off: no spans, no `traceparent` stored or sent.
    pub const OFF: Traces = Traces(None);

    /// Spans go to `tracer` (its provider exports them).
    pub fn to(tracer: SdkTracer) -> Self {
        Traces(Some(tracer))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Starts span `name` of `kind` under `parent` (a [`Span::context`]; with no span in it,
    /// the span starts a trace of its own).
    pub fn start(&self, name: &'static str, kind: SpanKind, parent: &Context) -> Span {
        self.begin(name, kind, parent, None)
    }

    /// Starts span `name` of `kind` under the span `traceparent` names: in its trace, or in a
    /// trace of its own when it names none (absent or invalid). Read only when tracing is on.
    pub fn continuing(
        &self,
        name: &'static str,
        kind: SpanKind,
        traceparent: Option<&str>,
    ) -> Span {
        match self.0 {
            Some(_) => self.start(name, kind, &parent(traceparent)),
            None => Span(None),
        }
    }

    /// A span that starts a trace of its own and began at `began`: made once it is known to
    /// be worth one (a claim that took something), not for every look.
    pub fn began(&self, name: &'static str, kind: SpanKind, began: SystemTime) -> Span {
        self.begin(name, kind, &Context::new(), Some(began))
    }

    fn begin(
        &self,
        name: &'static str,
        kind: SpanKind,
        parent: &Context,
        began: Option<SystemTime>,
    ) -> Span {
        Span(self.0.as_ref().map(|tracer| {
            let mut builder = tracer.span_builder(name).with_kind(kind);
            builder.start_time = began;
            parent.with_span(builder.start_with_context(tracer, parent))
        }))
    }
}

/// One span, or nothing when tracing is off. It ends when dropped.
#[derive(Debug, Default)]
pub struct Span(Option<Context>);

impl Span {
    /// Whether there is no span (tracing is off): what only a span needs can be skipped.
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// The span as a parent for others (empty when tracing is off).
    pub fn context(&self) -> Context {
        self.0.clone().unwrap_or_default()
    }

    pub fn set(&self, attribute: KeyValue) {
        if let Some(cx) = &self.0 {
            cx.span().set_attribute(attribute);
        }
    }

    /// Marks the span failed, saying why.
    pub fn fail(&self, why: String) {
        if let Some(cx) = &self.0 {
            cx.span().set_status(Status::error(why));
        }
    }

    /// Links it to `other` (an attempt to the claim batch that took it: the batch's trace is
    /// not the publish's).
    pub fn link(&self, other: &Span) {
        if let (Some(cx), Some(other)) = (&self.0, &other.0) {
            cx.span()
                .add_link(other.span().span_context().clone(), Vec::new());
        }
    }

    /// Its `traceparent` header value, when tracing is on.
    pub fn traceparent(&self) -> Option<String> {
        let cx = self.0.as_ref()?;
        let mut header = Outgoing(None);
        TraceContextPropagator::new().inject_context(cx, &mut header);
        header.0
    }
}

/// The context a `traceparent` header value names, as a remote parent; an empty context (the
/// next span starts a trace of its own) when it is absent or not a valid W3C `traceparent`.
fn parent(traceparent: Option<&str>) -> Context {
    match traceparent {
        Some(text) => TraceContextPropagator::new().extract(&Incoming(text)),
        None => Context::new(),
    }
}

/// One `traceparent` value, for the W3C propagator to read (no `tracestate`: hookline keeps
/// none).
struct Incoming<'a>(&'a str);

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

/// Where the W3C propagator writes a span's `traceparent` (its `tracestate` is not kept).
struct Outgoing(Option<String>);

impl Injector for Outgoing {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    const INCOMING: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn on() -> (SdkTracerProvider, Traces) {
        let provider = SdkTracerProvider::builder().build();
        let traces = Traces::to(provider.tracer("test"));
        (provider, traces)
    }

    /// A child of a `traceparent` keeps its trace id, gets a span id of its own, and says so
    /// in its own `traceparent`.
    #[test]
    fn a_span_under_a_traceparent_continues_its_trace() {
        let (_provider, traces) = on();
        let span = traces.start("attempt", SpanKind::Client, &parent(Some(INCOMING)));
        let own = span.traceparent().unwrap();
        let parts: Vec<&str> = own.split('-').collect();
        assert_eq!(parts[0], "00");
        assert_eq!(parts[1], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(parts[2], "00f067aa0ba902b7");
        assert_eq!(parts[3], "01");
    }

    /// A trace its publisher did not sample is not recorded here either, and is passed on as
    /// unsampled.
    #[test]
    fn an_unsampled_trace_stays_unsampled() {
        let (_provider, traces) = on();
        let unsampled = INCOMING.replace("-01", "-00");
        let span = traces.continuing("attempt", SpanKind::Client, Some(&unsampled));
        let own = span.traceparent().unwrap();
        assert!(
            own.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{own}"
        );
        assert!(own.ends_with("-00"), "{own}");
    }

    /// Anything but a valid `traceparent` is ignored: the span starts a trace of its own.
    #[test]
    fn an_invalid_traceparent_starts_a_new_trace() {
        let (_provider, traces) = on();
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(!parent(Some(bad)).has_active_span(), "{bad:?}");
            let span = traces.start("publish", SpanKind::Server, &parent(Some(bad)));
            let own = span.traceparent().unwrap();
            assert!(!own.contains("4bf92f3577b34da6a3ce929d0e0e4736"), "{bad:?}");
        }
    }

    /// Off, a span is nothing: no context to pass on, no header.
    #[test]
    fn off_there_is_no_span_and_no_traceparent() {
        let span = Traces::OFF.start("attempt", SpanKind::Client, &parent(Some(INCOMING)));
        assert_eq!(span.traceparent(), None);
        assert!(!span.context().has_active_span());
        assert!(!Traces::OFF.is_on());
    }
}
