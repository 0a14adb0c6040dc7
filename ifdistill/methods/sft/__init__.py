"""Supervised fine-tuning: the base class of every training method (:mod:`.module`)."""
