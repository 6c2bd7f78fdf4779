"""The fit layer: one fit's iterations (the loop), the client-side merge rules, stored runs,
predictions into tables, and database errors told as where and why."""
