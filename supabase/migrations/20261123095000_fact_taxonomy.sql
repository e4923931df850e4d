-- Fact taxonomy: user_memory.category for kind = 'fact' allows the ten categories of memory_plugin.taxonomy.
--
-- Seed 004's preference / requirement / constraint / feedback, seed 002's rejection ("don't suggest X"),
-- and seed 000's goal / routine / contact / health_note (non-clinical only) / fact. The clauses of the
-- other kinds are exactly those of 20261122120000_user_memory.sql. Existing rows all satisfy the new
-- check (it only widens the fact clause), so re-adding it validates without rewriting anything.

alter table public.user_memory drop constraint user_memory_category_check;
alter table public.user_memory add constraint user_memory_category_check check (
    (kind = 'fact' and category in (
        'preference', 'requirement', 'constraint', 'feedback',
        'rejection',
        'goal', 'routine', 'contact', 'health_note', 'fact'))
    or (kind = 'preference' and category in
        ('preferred_materials', 'typical_quantities', 'communication_style', 'industry', 'location'))
    or (kind in ('project', 'pattern') and category = kind)
);
