"""The group layer: group objects, their core (sequence numbers, fingerprints, deadlines,
broken state), point-to-point messages, object collectives and argument checks."""
