"""The forecast of a fit's gap to one worker: the early warning a fit gives from its first epochs
(``early_warning``) and the gap law fitted over numbers of segments, with its interval
(``gap_law``)."""
