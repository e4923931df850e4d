-- Seed data for `supabase db reset` (local development with the Supabase CLI): the memory of the demo
-- user of `memory-plugin demo` (5f0c7a1e-0000-4000-8000-00000000de70), written through the function the
-- plugin itself uses, with the plugin's own content hashes, so a later repeat of these facts reinforces
-- the rows instead of duplicating them (tests/test_supabase_project.py checks it). Runs as `postgres`.

select count(*) as seeded_items
  from public.memory_upsert_items(
    '5f0c7a1e-0000-4000-8000-00000000de70'::uuid,
    $seed$[
  {
    "kind": "fact",
    "category": "preference",
    "content": "Prefiere aluminio 7075 para los prototipos",
    "content_hash": "810ba751edf6e97be89552d52dc71de3e8c3b91a3c1c8a18353df4035ab81bee",
    "confidence": 0.9,
    "source": "explicit",
    "importance": 4,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "fact",
    "category": "requirement",
    "content": "Requiere certificación ISO 9001 en todas las piezas",
    "content_hash": "a10b27905f8a8077631b4d2551093e41331352cd3e2a69f321c47e4917394800",
    "confidence": 0.9,
    "source": "explicit",
    "importance": 5,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "fact",
    "category": "constraint",
    "content": "No puede superar 1500€ por pedido",
    "content_hash": "8da027fa68b72ea5bf16b61c847135a5d2b5a0dc7a51cdfb5c34a133ff964a05",
    "confidence": 0.9,
    "source": "explicit",
    "importance": 5,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "fact",
    "category": "feedback",
    "content": "Prefers short answers with exact figures",
    "content_hash": "722b93bf48169f8c84307f18fa9d22506dce3d1b38b4d59c560d92e90d80d6dd",
    "confidence": 0.7,
    "source": "inferred",
    "importance": 2,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "preference",
    "category": "preferred_materials",
    "content": "aluminio 7075",
    "content_hash": "71275047b7f7d4ac68331534f6eaf37f9e386a3d63f3375a0fd883c4f8671f73",
    "confidence": 0.9,
    "source": "explicit",
    "importance": 3,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "preference",
    "category": "communication_style",
    "content": "technical",
    "content_hash": "5866c20af6a26f8dbd5fe7d0387b4b5332ab26fa4ce65267b7751bfde6ab531a",
    "confidence": 0.9,
    "source": "explicit",
    "importance": 3,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "preference",
    "category": "industry",
    "content": "aeronáutica",
    "content_hash": "afdea263e69e3b9652f14b1d164c49cb291707438d97e1307bbae7b62a88c455",
    "confidence": 0.9,
    "source": "explicit",
    "importance": 3,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  },
  {
    "kind": "project",
    "category": "project",
    "content": "50 piezas de fresado CNC en aluminio 7075 (±0.05 mm, ISO 9001)",
    "content_hash": "1cbb2916814dca94734e38e59f3222dbb4a1861347d20537686c8e415c512ed3",
    "confidence": 1.0,
    "source": "explicit",
    "importance": 3,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {
      "materials": [
        "aluminio 7075"
      ],
      "quantity": "50",
      "status": "quoted"
    },
    "occurred_at": null
  },
  {
    "kind": "pattern",
    "category": "pattern",
    "content": "budget_request: fresado CNC",
    "content_hash": "78cfecfbe89e36422025a3d873712b57fb484c070043f1ebb8d944ba6a59cf1b",
    "confidence": 0.8,
    "source": "inferred",
    "importance": 3,
    "source_message_ids": [],
    "session_id": "seed",
    "attributes": {},
    "occurred_at": null
  }
]$seed$::jsonb
  );
