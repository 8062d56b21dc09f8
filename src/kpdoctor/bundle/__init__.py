"""Evidence: typed artifacts from bundles, tarballs, folders, loose files and transcripts."""
