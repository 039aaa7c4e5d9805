"""The whole pipeline in one command: collect, buckets, cache, pretrain, posttrain (bin/pipeline)."""
