//! The event type catalog: registered once by name, listed in order, changed by patches that
//! add or replace schema versions, bounded.

use std::collections::BTreeMap;

use super::*;

fn new_type(name: &str, schemas: &[(i64, &str)]) -> NewEventType {
    NewEventType {
        name: name.into(),
        description: Some(format!("{name}, described")),
        schemas: schemas.iter().map(|(v, s)| (*v, (*s).to_owned())).collect(),
        deprecated: false,
        created_by: Some("oncall".into()),
    }
}

pub(crate) async fn event_types_are_registered_listed_and_changed(h: &impl Harness) {
    let store = h.open().await;
    let schema = r#"{"type": "object", "required": ["shipment"]}"#;
    let created = store
        .create_event_type(new_type("shipment.delivered", &[(1, schema)]), T0)
        .await
        .unwrap();
    assert_eq!(
        created,
        EventType {
            name: "shipment.delivered".into(),
            description: Some("shipment.delivered, described".into()),
            schemas: BTreeMap::from([(1, schema.to_owned())]),
            deprecated: false,
            revision: 1,
            created_at: T0,
            updated_at: T0,
            created_by: Some("oncall".into()),
        },
        "the schema is kept exactly as given"
    );
    assert_eq!(
        store.get_event_type("shipment.delivered").await.unwrap(),
        created
    );
    assert!(matches!(
        store.get_event_type("shipment.lost").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .create_event_type(new_type("shipment.delivered", &[]), T0)
            .await,
        Err(StoreError::Conflict(_))
    ));

    // A patch adds a version, replaces one, keeps what it leaves out.
    let patch = EventTypePatch {
        description: None,
        schemas: BTreeMap::from([(2, "true".to_owned()), (1, "{}".to_owned())]),
        deprecated: Some(true),
    };
    let changed = store
        .update_event_type("shipment.delivered", patch, T0 + 5)
        .await
        .unwrap();
    assert_eq!(
        changed.schemas,
        BTreeMap::from([(1, "{}".to_owned()), (2, "true".to_owned())])
    );
    assert!(changed.deprecated);
    assert_eq!(
        changed.description.as_deref(),
        Some("shipment.delivered, described")
    );
    assert_eq!((changed.revision, changed.updated_at), (2, T0 + 5));
    assert_eq!(
        store.get_event_type("shipment.delivered").await.unwrap(),
        changed
    );
    let cleared = EventTypePatch {
        description: Some(None),
        ..Default::default()
    };
    let cleared = store
        .update_event_type("shipment.delivered", cleared, T0 + 6)
        .await
        .unwrap();
    assert_eq!((cleared.description, cleared.revision), (None, 3));
    assert!(matches!(
        store
            .update_event_type("shipment.lost", EventTypePatch::default(), T0)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Listed in the order they were registered, paged.
    for name in ["invoice.paid", "invoice.voided"] {
        store
            .create_event_type(new_type(name, &[]), T0)
            .await
            .unwrap();
    }
    let page = store.list_event_types(2, None).await.unwrap();
    let names: Vec<&str> = page.items.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["shipment.delivered", "invoice.paid"]);
    let rest = store.list_event_types(2, page.next_cursor).await.unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].name, "invoice.voided");
    assert_eq!(rest.next_cursor, None);
    assert!(rest.items[0].schemas.is_empty());

    drop(store);
    let reopened = h.open().await;
    assert_eq!(
        reopened
            .get_event_type("shipment.delivered")
            .await
            .unwrap()
            .revision,
        3
    );
}

pub(crate) async fn a_refused_change_changes_nothing(h: &impl Harness) {
    let store = h.open().await;
    let created = store
        .create_event_type(new_type("order.placed", &[(1, "{}")]), T0)
        .await
        .unwrap();
    // One version past what a type may have, with other changes beside it.
    let versions = i64::try_from(MAX_SCHEMA_VERSIONS).unwrap();
    let patch = EventTypePatch {
        description: Some(Some("changed".into())),
        schemas: (2..=versions + 1).map(|v| (v, "{}".to_owned())).collect(),
        deprecated: Some(true),
    };
    assert!(matches!(
        store.update_event_type("order.placed", patch, T0 + 1).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.get_event_type("order.placed").await.unwrap(), created);
    let too_many = (1..=versions + 1).map(|v| (v, "{}")).collect::<Vec<_>>();
    assert!(matches!(
        store
            .create_event_type(new_type("order.shipped", &too_many), T0)
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.get_event_type("order.shipped").await,
        Err(StoreError::NotFound(_))
    ));
    // Text that is not JSON is not kept as a schema.
    assert!(matches!(
        store
            .create_event_type(new_type("order.shipped", &[(1, "{")]), T0)
            .await,
        Err(StoreError::Invalid(_))
    ));
}

pub(crate) async fn the_catalog_s_revision_moves_with_every_write(h: &impl Harness) {
    let store = h.open().await;
    assert_eq!(store.event_types_revision().await.unwrap(), 0);
    store
        .create_event_type(new_type("a", &[]), T0)
        .await
        .unwrap();
    store
        .create_event_type(new_type("b", &[]), T0)
        .await
        .unwrap();
    assert_eq!(store.event_types_revision().await.unwrap(), 2);
    let deprecate = EventTypePatch {
        deprecated: Some(true),
        ..Default::default()
    };
    store.update_event_type("a", deprecate, T0).await.unwrap();
    assert_eq!(store.event_types_revision().await.unwrap(), 3);
    // A refused write moves nothing.
    assert!(store
        .create_event_type(new_type("a", &[]), T0)
        .await
        .is_err());
    assert_eq!(store.event_types_revision().await.unwrap(), 3);
}
