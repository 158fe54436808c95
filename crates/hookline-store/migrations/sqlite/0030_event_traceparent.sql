-- The W3C `traceparent` of the span that published each event, when tracing is on (NULL
-- otherwise, and for every event published before): each attempt's span continues its trace.
ALTER TABLE events ADD COLUMN traceparent TEXT;
