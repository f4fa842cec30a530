"""The demo job: enrichment with a simulated slow remote call per record."""
