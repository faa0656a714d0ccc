"""The packed prefill: checkpoints run as encoders over rows packed without padding (public: inferlab.engine)."""
