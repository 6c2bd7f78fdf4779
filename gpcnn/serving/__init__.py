"""The serving layer: what a trained model is used for once a fit is over — the model library
(``model_library``: models stored in the database under a name) and prediction on the segments
(``predictions``: into a table or back to the client; ``direct_prediction``: any model, without a
fit)."""
