"""The batch's rows and the per-row features that live in them (feature.py: the RowFeature protocol;
features.py: the registration and the graph Variant)."""
