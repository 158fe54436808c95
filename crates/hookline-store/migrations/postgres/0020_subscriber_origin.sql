-- Filled in by the binary (`rules::origin`, the `url` crate's reading of the URL), at every
-- start for rows an older binary wrote: SQL has no URL parser to agree with it.
ALTER TABLE subscribers ADD COLUMN origin TEXT;
