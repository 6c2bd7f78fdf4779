"""MADlib's deep-learning SQL interface on gpcnn: its parameter strings and Keras 2 model
architectures read into gpcnn's, so that a MADlib user's calls train through gpcnn's own loop."""
