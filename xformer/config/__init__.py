"""The configuration, between training and the job around it: override strings read with Hydra's parser
(:mod:`.overrides`), the config check before anything is built (:mod:`.check`), and whether a checkpoint
fits a config (:mod:`.checkpoint`)."""
