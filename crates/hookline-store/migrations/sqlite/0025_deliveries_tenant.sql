-- Fair share across tenants: each delivery of a tenant's event names the tenant (its event's,
-- which is its subscriber's), written by the fan-out, so a claim finds each tenant's due rows
-- through an index of its own rather than behind another tenant's in due order. NULL for a
-- delivery without a tenant, and for every row an older binary writes: those are not in the
-- index, so they pay nothing for it.
ALTER TABLE deliveries ADD COLUMN tenant_id TEXT;
CREATE INDEX deliveries_tenant_due ON deliveries (tenant_id, run_at)
    WHERE state = 'scheduled' AND held = 0 AND tenant_id IS NOT NULL;
