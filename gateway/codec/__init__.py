"""What a dialect's codecs provide and may rely on: the contract between dialects and the proxy."""
