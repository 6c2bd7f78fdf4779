"""The model hopper (Cerebro's MOP, MADlib's ``madlib_keras_fit_multiple_model``): its rotation of
M models over the segments (``rotation``) and the estimator-level API that feeds it configurations
(``search``: ``fit_multiple``, ``GreenplumModelSearch``)."""
