-- One row per MMRB2 task: size, label balance and image health of the current release.
select
    p.task,
    count(*)                                              as pairs,
    round(avg((p.chosen = 'A')::int) * 100, 1)            as chosen_a_pct,
    sum(p.n_images_a + p.n_images_b)                      as response_images,
    count(*) filter (where p.n_images_a + p.n_images_b = 0) as pairs_without_images,
    coalesce(sum(bad.n), 0)                               as images_not_ok
from mmrb2_pairs p
left join (
    select i.pair_id, count(*) as n
    from mmrb2_response_items i
    join mmrb2_images m using (image_name)
    where i.kind = 'image' and m.status <> 'ok'
    group by i.pair_id
) bad using (pair_id)
group by p.task
order by p.task
