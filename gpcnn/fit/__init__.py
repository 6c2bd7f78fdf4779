"""The fit layer: one fit's iterations (the loop), the client-side merge rules, the diagnostics
and the forecast of the gap to one worker, stored runs, and database errors told as where and
why."""
