-- The full marker's prefix (the marker is FULL_PREFIX .. max_leaders): placed first in every
-- script, before acquire's refusal and the prelude.
local FULL_PREFIX = 'leader-full:'
